"""A data-science stack on Eddy without a mount: pandas writes Parquet through fsspec's
`eddy://`, xarray writes a zarr store there, and both are read back and checked.

    EDDY_STATE=/path/to/state python3 dataframes.py [DIR]
"""

import sys

import numpy as np
import pandas as pd
import xarray as xr


def main() -> int:
    top = sys.argv[1] if len(sys.argv) > 1 else "/dataframes-python"
    df = pd.DataFrame({"rank": np.arange(1000), "value": np.random.default_rng(7).random(1000)})
    df.to_parquet(f"eddy://{top}/table.parquet")
    back = pd.read_parquet(f"eddy://{top}/table.parquet")
    if not back.equals(df):
        print("the Parquet table read back differs", file=sys.stderr)
        return 1

    ds = xr.Dataset({"t": (("x", "y"), np.arange(64 * 64, dtype="f4").reshape(64, 64))})
    ds.to_zarr(f"eddy://{top}/grid.zarr", mode="w")
    again = xr.open_zarr(f"eddy://{top}/grid.zarr")
    if not again["t"].equals(ds["t"]):
        print("the zarr store read back differs", file=sys.stderr)
        return 1
    print(len(back), again["t"].shape)
    return 0


if __name__ == "__main__":
    sys.exit(main())
