#!/bin/bash
# An analysis reading a large data set: the data set is staged onto the I/O-node pool (and
# pinned there) while the job waits in the queue, so its nodes start on warm data.
#SBATCH -N 16
#SBATCH -t 02:00:00
#EDDY capacity=2T pool=io nodes=4 chunk_size=1M
#EDDY link /ds=/lustre/datasets/climate-2025
#EDDY link /out=/lustre/project/analysis
#EDDY stage_in /ds/daily pin
#EDDY stage_out /out/run42
set -eu
mkdir -p "$EDDY_MOUNT/out/run42"
srun ./analyse --in "$EDDY_MOUNT/ds/daily" --out "$EDDY_MOUNT/out/run42"
# The job may also stage by itself (namespace paths), through the deployment file in
# $EDDY_STATE; here a checkpoint, durable in the backend before the next step starts.
eddy stage-out /out/run42
