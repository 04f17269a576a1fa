"""The shared core every lab imports. Not an exercise: read it, don't edit it.

model       a small GPT that knows nothing of parallelism
data        generated Markov-chain token files with a known loss floor, a resumable sampler
dist        device + backend choice, process-group init/teardown, rank-0 logging
metrics     FLOPs per token, MFU (datasheet or measured peak), the JSONL step log
checkpoint  atomic writes, RNG state capture
profiler    where a step's time goes (data, forward, backward, comm, optimizer), input stall, CPU use
collectives all-reduce timestamps and the communication time hidden behind backward
trace       a short torch.profiler window exported for Perfetto; trace_plot draws one as a PNG
pipeline    a dataset whose samples cost CPU time to prepare (lab 1's input-pipeline exercise)
"""
