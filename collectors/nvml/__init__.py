"""The NVML power collector (`wattline collect`): a low-overhead daemon writing the `power` dataset.

One thread per GPU samples instantaneous + 1 s average power every tick (one
``nvmlDeviceGetFieldValues`` call), slow fields every second, the energy counter every
``--energy-seconds`` and drains the driver's ~20 ms power buffer; the main thread flushes rows
to atomic Parquet files. Runtime needs only pyarrow and an NVML binding (pynvml), so it is
light on GPU hosts: ``python -m collectors.nvml --help``.
"""
