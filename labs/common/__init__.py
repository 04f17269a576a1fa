"""The shared core every lab imports. Not an exercise: read it, don't edit it.

The training core:
model       a small GPT that knows nothing of parallelism
data        generated Markov-chain token files with a known loss floor, a resumable sampler
dist        device + backend choice, process-group init/teardown, rank-0 logging
optim       the AdamW + learning-rate schedule every lab uses (16 bytes/parameter of model state)
precision   one switch for fp32 / bf16 mixed precision: autocast, FSDP2's and DeepSpeed's settings, the peak to use
metrics     FLOPs per token, MFU (datasheet or measured peak), the JSONL step log
steplog     the JSONL step log and its reader, without torch (metrics re-exports both)
checkpoint  atomic writes, RNG state capture
pipeline    a dataset whose samples cost CPU time to prepare (lab 1's input-pipeline exercise)

Measuring a run:
profiler    where a step's time goes (data, forward, backward, comm, optimizer), input stall, CPU use
collectives all-reduce timestamps and the communication time hidden behind backward
comm_bytes  bytes each rank sends, counted from the collectives it issues (ZeRO, FSDP, DDP side by side)
trace       a short torch.profiler window exported for Perfetto
trace_plot  exported traces drawn as a timeline PNG (docs/reading-a-trace.md)
stage_probe pipeline/tensor-parallel instruments: a stage of known cost, an activation meter
schedule_timeline  a pipeline schedule read from timestamps: bubble fraction, live activations, the picture

In a notebook:
dashboard   a live run in a cell: every rank's output, loss/tokens/s/memory plots, a Stop button
live_view   what the dashboard shows and how (lines, records, memory, widgets)
grade_table the checker's --json report as a table
proctree    a launched run's process tree: find, sample and end every process in it
"""
