#!/bin/bash
# One H200: python3 grouped_gemm.py (about a minute).
cd "$(dirname "$0")" && python3 grouped_gemm.py | tee grouped_gemm.jsonl
