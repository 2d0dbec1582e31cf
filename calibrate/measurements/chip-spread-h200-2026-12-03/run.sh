#!/bin/bash
# One board's burst and sustained rates under its cap, with its identity (spread.py says what runs).
# Run once on each machine the device service lends; each run's spread.json goes to boards/.
set -u
cd "$(dirname "$0")"
O=${OUT:-/tmp/out}; mkdir -p "$O"
python3 spread.py "$O" 2>&1 | tail -40
