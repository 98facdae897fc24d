"""`python -m collectors.nvml ...` == `wattline collect ...`, without importing the pipeline."""

from collectors.nvml.cli import main

main()
