"""Lab 6's mutants: one realistic slip per TODO (at least), and the check that must catch it.

schedules.py's `_send` and the checker's SleepStage are left unmutated: they are being reshaped for GPUs.
two_d.py (FSDP2 x TP on 4 ranks) is optional and not graded, so it has no mutant.
"""
from . import Mutant

_TPL, _TP, _DT = "tp_layers.py", "tensor_parallel.py", "tp_dtensor.py"
_SCH, _ST, _TPP = "schedules.py", "stages.py", "torch_pipeline.py"

MUTANTS = [
    # tp_layers.py: the conjugate pair f / g and the two split layers
    Mutant("f_no_allreduce_backward", _TPL, "        dist.all_reduce(grad, group=ctx.group)\n        return grad, None",
           "        return grad, None", "tp_equivalence",
           "copy_to_tp's backward passes the partial input gradient through: LayerNorms and embeddings get 1/N of it"),
    Mutant("g_allreduce_backward", _TPL,  # g's backward: the `return grad, None` just before copy_to_tp
           "        return grad, None\n        # END SOLUTION\n\n\ndef copy_to_tp",
           "        grad = grad.clone()\n        dist.all_reduce(grad, group=ctx.group)\n        return grad, None\n"
           "        # END SOLUTION\n\n\ndef copy_to_tp",
           "tp_comm", "reduce_from_tp also all-reduces in backward: an extra collective per row-parallel layer"),
    Mutant("column_uses_g", _TPL, "return F.linear(copy_to_tp(x, self.group), self.weight, self.bias)",
           "return F.linear(reduce_from_tp(x, self.group), self.weight, self.bias)", "tp_equivalence",
           "f and g swapped in the column-parallel layer: its (replicated) input is all-reduced in forward"),
    Mutant("column_keeps_full_linear", _TPL,
           "        self.weight = nn.Parameter(linear.weight.detach()[rows].clone())\n",
           "        self.full = linear  # kept for reference\n"
           "        self.weight = nn.Parameter(linear.weight.detach()[rows].clone())\n", "tp_memory",
           "the column-parallel layer keeps the whole nn.Linear as a submodule: every rank still holds all of it"),
    Mutant("row_bias_before_reduce", _TPL,
           "        out = reduce_from_tp(F.linear(x, self.weight), self.group)\n"
           "        return out + self.bias if self.bias is not None else out",
           "        return reduce_from_tp(F.linear(x, self.weight, self.bias), self.group)", "tp_equivalence",
           "the row-parallel bias is added on every rank before the all-reduce: summed N times (invisible at bias 0)"),
    Mutant("row_bias_sliced", _TPL,
           "        self.bias = nn.Parameter(linear.bias.detach().clone()) if linear.bias is not None else None\n",
           "        self.bias = nn.Parameter(linear.bias.detach().clone() / dist.get_world_size(group)) "
           "if linear.bias is not None else None\n",
           "tp_equivalence",
           "the row-parallel bias is stored divided by N, as if it were summed (invisible at bias 0)"),
    # tensor_parallel.py: heads and the plan
    Mutant("qkv_rows_contiguous", _TP, "    part = block_rows(n_embd, rank, world)\n"
           "    return torch.cat([part, part + n_embd, part + 2 * n_embd])",
           "    return block_rows(3 * n_embd, rank, world)", "tp_equivalence",
           "qkv split into contiguous thirds of 3d rows: rank 0 gets all of q and half of k, not whole heads"),
    Mutant("heads_not_transposed_back", _TP, "y = y.transpose(1, 2).contiguous().view(B, T, width)",
           "y = y.contiguous().view(B, T, width)", "tp_equivalence",
           "attention output reshaped from (B, heads, T, hd) without the transpose: heads and positions mixed"),
    Mutant("attention_not_causal", _TP, "is_causal=True,", "is_causal=False,", "tp_equivalence",
           "the split attention forgets the causal mask"),
    Mutant("mlp_proj_wrong_columns", _TP, "block.mlp.proj = RowParallelLinear(block.mlp.proj, hidden, group)",
           "block.mlp.proj = RowParallelLinear(block.mlp.proj, block_rows(4 * d, world - 1 - rank, world), group)",
           "tp_equivalence", "the row-parallel layer takes other hidden units than the column-parallel one produced"),
    # tp_dtensor.py: the permutation and the plan
    Mutant("interleave_forgets_bias", _DT,
           "        if qkv.bias is not None:\n            qkv.bias.copy_(qkv.bias[order])\n",
           "", "tp_equivalence", "qkv's rows are permuted but its bias is not (invisible at bias 0)"),
    Mutant("no_interleave", _DT, "        interleave_qkv(a.qkv, cfg.n_head, world)\n", "", "tp_equivalence",
           "ColwiseParallel shards qkv contiguously without the head permutation"),
    Mutant("plan_proj_colwise", _DT, '"attn.proj": RowwiseParallel(),\n', '"attn.proj": ColwiseParallel(),\n',
           "tp_equivalence", "attention's output projection sharded on the wrong dim (Shard(0), not Shard(1))"),
    # schedules.py
    Mutant("loss_not_scaled", _SCH, "            out = loss / self.m  #", "            out = loss  #", "pp_equivalence",
           "each micro-batch's loss is not divided by m: the gradient is m times the batch's"),
    Mutant("backward_sends_nothing", _SCH,
           "        if not self.first:\n            self._send(x.grad, self.rank - 1)\n",
           "", "pp_equivalence", "backward never sends dL/dx upstream: the earlier stage waits forever"),
    Mutant("gpipe_not_pipelined", _SCH, "    for i in range(pipe.m):\n        pipe.forward(i)\n"
           "    for i in range(pipe.m):\n        pipe.backward(i)\n",
           "    for i in range(pipe.m):\n        pipe.forward(i)\n        pipe.backward(i)\n", "pp_bubble",
           "GPipe runs each micro-batch's backward before the next forward: the stages take turns"),
    Mutant("gpipe_waits_each_forward", _SCH, "    for i in range(pipe.m):\n        pipe.forward(i)\n    for i",
           "    for i in range(pipe.m):\n        pipe.forward(i)\n        dist.barrier()  # keep the stages in step\n"
           "    for i", "pp_bubble",
           "GPipe waits for the other stage after every forward: the order is right, the forwards run one stage "
           "after the other"),
    Mutant("1f1b_holds_m", _SCH, "    warmup = min(pipe.p - 1 - pipe.rank, pipe.m)",
           "    warmup = pipe.m", "pp_1f1b_memory", "1F1B warms up with all m forwards: it is GPipe, holding m"),
    Mutant("1f1b_warmup_off_by_one", _SCH, "    warmup = min(pipe.p - 1 - pipe.rank, pipe.m)",
           "    warmup = min(pipe.p - pipe.rank, pipe.m)", "pp_1f1b_memory",
           "1F1B warms up with p - rank forwards: one micro-batch more than needed on every stage"),
    # stages.py
    Mutant("stage_boundary_off", _ST,
           "range(stage * per, (stage + 1) * per), first=stage == 0, last=stage == n_stages - 1,\n",
           "range(stage * per, n_layer), first=stage == 0, last=stage == n_stages - 1,\n",
           "pp_equivalence", "each stage runs from its first block to the model's last: blocks run twice"),
    Mutant("stage_forgets_positions", _ST, "x = self.drop(self.tok_emb(x) + self.pos_emb(pos))",
           "x = self.drop(self.tok_emb(x))", "pp_equivalence", "the first stage leaves out the position embedding"),
    Mutant("tied_grads_not_summed", _ST, "    dist.all_reduce(tied.grad, group=stage.tied_group)\n", "",
           "pp_equivalence", "the tied embedding/head gradient is not summed across the first and last stage"),
    # torch_pipeline.py
    Mutant("torch_grads_unscaled", _TPP, "return cls(stage, n_microbatches=n_micro, loss_fn=loss_fn)",
           "return cls(stage, n_microbatches=n_micro, loss_fn=loss_fn, scale_grads=False)", "pp_equivalence",
           "torch's schedule sums the micro-batches' gradients instead of averaging them"),
]
