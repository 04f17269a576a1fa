"""Instruments that measure a run, from inside (timers, hooks, byte counters) or from outside (its processes).
The labs' scripts and the checker use the same ones, so a learner sees the numbers the grade is made of.
Not an exercise: read them, don't edit them.

profiler          where a step's time goes (data, forward, backward, comm, optimizer), input stall, CPU use
collectives       all-reduce timestamps and the communication time hidden behind backward
comm_bytes        bytes each rank sends, counted from the collectives it issues (ZeRO, FSDP, DDP side by side)
trace             a short torch.profiler window exported for Perfetto
trace_plot        exported traces drawn as a timeline PNG (docs/reading-a-trace.md)
stage_probe       pipeline/tensor-parallel instruments: a stage of known cost, an activation meter
schedule_timeline a pipeline schedule read from timestamps: bubble fraction, live activations, the picture
proctree          a launched run's process tree, from /proc: find, sample and end every process in it
memory_history    every allocation and free with its Python stack, as torch's memory snapshot (GPU: torch's own)
fast_path         a step's parts timed alone (optimizer, matmuls fp32/bf16, half batch), and each switch measured
"""
