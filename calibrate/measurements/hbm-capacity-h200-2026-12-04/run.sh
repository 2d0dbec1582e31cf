#!/bin/bash
# One H200: python3 capacity.py (a few seconds).
cd "$(dirname "$0")" && python3 capacity.py
