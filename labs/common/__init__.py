"""The shared core every lab imports. Not an exercise: read it, don't edit it.

model       a small GPT that knows nothing of parallelism
data        generated Markov-chain token files with a known loss floor, a resumable sampler
dist        device + backend choice, process-group init/teardown, rank-0 logging
metrics     FLOPs per token, MFU, the JSONL step log
checkpoint  atomic writes, RNG state capture
"""
