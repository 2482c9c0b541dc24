"""`eddy://` through fsspec: found by its entry point, used by pandas, zarr and xarray."""

import fsspec
import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr

from eddy.fsspec import EddyFileSystem


def test_fsspec_finds_the_file_system_by_its_entry_point():
    assert fsspec.get_filesystem_class("eddy") is EddyFileSystem
    fs = fsspec.filesystem("eddy")
    assert isinstance(fs, EddyFileSystem)
    assert fs.exists("/")


def test_the_file_system_calls(d):
    fs = fsspec.filesystem("eddy")
    fs.pipe_file(f"eddy://{d}/a/b.bin", b"0123456789")
    assert fs.cat_file(f"{d}/a/b.bin") == b"0123456789"
    assert fs.cat_file(f"{d}/a/b.bin", start=2, end=5) == b"234"
    assert fs.info(f"{d}/a/b.bin")["size"] == 10
    assert fs.info(f"{d}/a")["type"] == "directory"
    assert fs.ls(d, detail=False) == [f"{d}/a"]
    fs.cp_file(f"{d}/a/b.bin", f"{d}/a/c.bin")
    fs.mv(f"{d}/a/c.bin", f"{d}/d.bin")
    assert sorted(fs.find(d)) == [f"{d}/a/b.bin", f"{d}/d.bin"]
    assert fs.cat(f"{d}/d.bin") == b"0123456789"
    fs.rm(f"{d}/a", recursive=True)
    assert not fs.exists(f"{d}/a")
    with pytest.raises(FileNotFoundError):
        fs.info(f"{d}/a")
    with fsspec.open(f"eddy://{d}/t.txt", "w") as f:
        f.write("text through fsspec\n")
    with fsspec.open(f"eddy://{d}/t.txt", "r") as f:
        assert f.read() == "text through fsspec\n"


def test_pandas_parquet_round_trip(d):
    df = pd.DataFrame({"i": np.arange(50_000), "x": np.random.default_rng(3).random(50_000),
                       "s": [f"row{i}" for i in range(50_000)]})
    df.to_parquet(f"eddy://{d}/t.parquet")
    assert pd.read_parquet(f"eddy://{d}/t.parquet").equals(df)
    df.to_csv(f"eddy://{d}/t.csv", index=False)
    # Text loses the last bits of some floats: compared to a tolerance.
    pd.testing.assert_frame_equal(pd.read_csv(f"eddy://{d}/t.csv"), df)


def test_zarr_array_round_trip(client, d):
    data = np.arange(200 * 300, dtype=np.float64).reshape(200, 300)
    z = zarr.open(f"eddy://{d}/a.zarr", mode="w", shape=data.shape, chunks=(20, 30),
                  dtype="f8")
    z[:] = data
    back = zarr.open(f"eddy://{d}/a.zarr", mode="r")
    assert back.nchunks == 100
    np.testing.assert_array_equal(back[:], data)
    np.testing.assert_array_equal(back[15:45, 100:130], data[15:45, 100:130])
    # The chunks are files of the namespace.
    assert len([n for n in client.listdir(d + "/a.zarr") if not n.startswith(".")]) == 100


def test_xarray_zarr_round_trip(d):
    rng = np.random.default_rng(4)
    ds = xr.Dataset(
        {"t": (("time", "x"), rng.random((24, 50)))},
        coords={"time": np.arange(24), "x": np.linspace(0, 1, 50)},
        attrs={"title": "through eddy://"},
    )
    ds.to_zarr(f"eddy://{d}/ds.zarr", mode="w")
    back = xr.open_zarr(f"eddy://{d}/ds.zarr")
    xr.testing.assert_identical(back.load(), ds)
