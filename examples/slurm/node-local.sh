#!/bin/bash
# A simulation on 4 nodes with a burst buffer on the nodes' own storage: inputs fetched from
# the project directory before the first step, results written back after the job.
#SBATCH -N 4
#SBATCH -t 01:00:00
#EDDY capacity=200G pool=node-local
#EDDY link /data=/lustre/project/run7
#EDDY stage_in /data/inputs
#EDDY stage_out /data/results
set -eu
mkdir -p "$EDDY_MOUNT/data/results"
srun ./simulate --in "$EDDY_MOUNT/data/inputs" --out "$EDDY_MOUNT/data/results"
# Scratch outside the linked prefix lives and dies with the job.
srun ./postprocess --tmp "$EDDY_MOUNT/tmp" --in "$EDDY_MOUNT/data/results"
