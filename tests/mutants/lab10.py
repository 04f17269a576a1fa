"""Lab 10's mutants: one realistic slip each, and the check that must catch it."""
from . import Mutant

_SLOTS = ("    flat = ids.t().reshape(-1)  # choice-major: every token's first choice, then every second choice\n"
          "    onehot = torch.nn.functional.one_hot(flat, n_experts)\n"
          "    slot = (onehot.cumsum(0) * onehot).sum(1) - 1  # 0-based position in its expert's queue\n"
          "    return (slot < cap).view(k, -1).t()\n")

MUTANTS = [
    Mutant("weights_not_renormalised", "router.py", "    return ids, w / w.sum(dim=-1, keepdim=True)\n",
           "    return ids, w\n", "router_equivalence",
           "the top-k probabilities used as they are: a token's expert weights do not sum to 1"),
    Mutant("bias_in_the_weights", "router.py", "    w = probs.gather(1, ids)\n", "    w = sel.gather(1, ids)\n",
           "router_equivalence", "the selection bias leaks into the combine weights: outputs biased, not just load"),
    Mutant("ties_to_the_higher_index", "router.py",
           "    ids = torch.argsort(sel.detach(), dim=-1, descending=True, stable=True)[:, :k]\n",
           "    ids = torch.argsort(sel.detach().flip(-1), dim=-1, descending=True, stable=True)[:, :k]\n"
           "    ids = sel.shape[-1] - 1 - ids\n",
           "router_equivalence", "equal probabilities resolved towards the higher expert index"),
    Mutant("aux_on_detached_probs", "router.py", "    return n_experts * (f * probs.mean(dim=0)).sum()\n",
           "    return n_experts * (f * probs.detach().mean(dim=0)).sum()\n", "aux_loss",
           "the balancing loss on detached probabilities: its value is right and it balances nothing"),
    Mutant("aux_f_from_probabilities", "router.py",
           "    f = torch.bincount(ids.flatten(), minlength=n_experts).to(probs.dtype) / ids.numel()\n",
           "    f = probs.mean(dim=0)\n", "aux_loss",
           "f taken as the mean probability: E sum P^2, not the Switch loss"),
    Mutant("slots_token_major", "capacity.py", _SLOTS,
           _SLOTS.replace("ids.t().reshape(-1)", "ids.reshape(-1)").replace(".view(k, -1).t()", ".view(-1, k)"),
           "capacity_drops", "slots handed out token by token: a token's second choice outranks a later first"),
    Mutant("capacity_over_all_experts", "capacity.py",
           "    slot = (onehot.cumsum(0) * onehot).sum(1) - 1  # 0-based position in its expert's queue\n",
           "    slot = torch.arange(len(flat)) // n_experts\n", "capacity_drops",
           "one queue for all experts: the first cap*E choices kept, whichever expert they chose"),
    Mutant("dropped_choices_computed", "moe.py", "            t, j = ((ids == e) & keep).nonzero(as_tuple=True)\n",
           "            t, j = (ids == e).nonzero(as_tuple=True)\n", "moe_equivalence",
           "capacity computed and ignored: every choice runs through its expert"),
    Mutant("outputs_not_weighted", "moe.py",
           "            out = out.index_add(0, t, expert_mlp(xt[t], self.w1[e], self.w2[e]) * w[t, j, None]"
           ".to(xt.dtype))\n",
           "            out = out.index_add(0, t, expert_mlp(xt[t], self.w1[e], self.w2[e]))\n", "moe_equivalence",
           "expert outputs summed without their weights: the router gets no gradient from the task"),
    Mutant("bias_moves_toward_the_load", "ep_step.py",
           "        bias.add_(gamma * torch.sign(counts.float().mean() - counts.float()))\n",
           "        bias.add_(gamma * torch.sign(counts.float() - counts.float().mean()))\n", "ep_balance",
           "the bias update's sign reversed: the busiest expert wins ever more tokens"),
    Mutant("counts_not_exchanged", "expert_parallel.py",
           "        recv_counts = exchange_counts(send_counts, self.group)  # (N, E/N)\n",
           "        recv_counts = send_counts.view(world, per)  # (N, E/N)\n", "ep_equivalence",
           "each rank assumes peers send it what it sends them: buffers sized from its own counts"),
    Mutant("rows_not_sorted_by_expert", "expert_parallel.py",
           "        order = torch.argsort(e, stable=True)  # grouped by expert, hence by destination rank\n",
           "        order = torch.arange(len(e))\n", "ep_equivalence",
           "rows sent in token order: the splits cut them at the wrong places"),
    Mutant("backward_splits_not_swapped", "expert_parallel.py",
           "        dist.all_to_all_single(gx, g.contiguous(), ctx.send, ctx.recv, group=ctx.group)\n",
           "        gx = g.new_empty(sum(ctx.recv), g.shape[1])\n"
           "        dist.all_to_all_single(gx, g.contiguous(), ctx.recv, ctx.send, group=ctx.group)\n",
           "ep_equivalence", "the all-to-all's backward with the forward's splits: gradients to the wrong rows"),
    Mutant("dropped_rows_dispatched", "expert_parallel.py",
           "        t, j = keep.nonzero(as_tuple=True)\n        e = ids[t, j]\n",
           "        t, j = torch.ones_like(keep).nonzero(as_tuple=True)\n        w = w * keep\n        e = ids[t, j]\n",
           "a2a_bytes", "every choice sent and computed, dropped ones zero-weighted on return: right outputs, "
           "wasted bytes"),
    Mutant("expert_grads_over_the_world", "ep_step.py",
           "            dist.all_reduce(p.grad, group=dp_group if id(p) in experts else None)\n",
           "            dist.all_reduce(p.grad)\n", "ep_dp_grads",
           "expert gradients all-reduced over every rank: other experts' gradients added in"),
    Mutant("expert_grads_divided_by_dp", "ep_step.py", "            p.grad /= world\n",
           "            p.grad /= dist.get_world_size(dp_group if id(p) in experts else None)\n", "ep_dp_grads",
           "expert gradients averaged over their dp replicas: ep times too large"),
    Mutant("bias_from_local_counts", "ep_step.py",
           "        dist.all_reduce(counts)  # over every rank: the bias must stay the same everywhere\n", "",
           "ep_dp_grads", "each rank moves its bias by its own loads: the ranks' routers drift apart"),
]
