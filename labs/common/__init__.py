"""The training core every lab imports. Not an exercise: read it, don't edit it.

model       a small GPT that knows nothing of parallelism
data        generated Markov-chain token files with a known loss floor, a resumable sampler
dist        device + backend choice, process-group init/teardown, rank-0 logging
compat      every difference between the supported torch releases (2.10-2.15), filled in when dist is imported
staging     collectives of GPU tensors through host memory: the teaching fallback for ranks sharing one GPU
optim       the AdamW + learning-rate schedule every lab uses (16 bytes/parameter of model state)
precision   one switch for fp32 / bf16 mixed precision: autocast, FSDP2's and DeepSpeed's settings, the peak to use
metrics     FLOPs per token, MFU (datasheet or measured peak), the JSONL step log
steplog     the JSONL step log and its reader, without torch (metrics re-exports both)
checkpoint  atomic writes, RNG state capture
pipeline    a dataset whose samples cost CPU time to prepare (lab 1's input-pipeline exercise)

Measuring a run is labs.instruments; watching one from a notebook is labs.notebook.
"""
