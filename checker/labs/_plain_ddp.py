"""The checker's own data-parallel wrapper, around which a learner's train_step and the reference's are compared
(lab 2's step_matches_reference): neither side's wrapper, so the step alone differs.

It keeps the contract the lab's wrappers keep: every rank starts from rank 0's weights; a backward outside
`no_sync()` launches, when it ends, one all-reduce of all the gradients, flattened (so the checker's
CollectiveRecorder counts one per synchronised backward); inside `no_sync()` they accumulate locally; and, as with
the lab's asynchronous wrappers, the average lands in .grad only at `finish_gradient_synchronization()`: a step
that never calls it keeps its local gradients, one that clips before it has its clipping overwritten.
"""
from __future__ import annotations


def plain_ddp(module):
    import contextlib

    import torch
    import torch.distributed as dist

    class PlainDDP(torch.nn.Module):
        def __init__(self, module):
            super().__init__()
            self.module, self._sync, self._queued, self._pending = module, True, False, None
            with torch.no_grad():
                for t in [*module.parameters(), *module.buffers()]:
                    dist.broadcast(t, 0)
            for p in module.parameters():
                if p.requires_grad:
                    p.register_post_accumulate_grad_hook(self._on_grad)

        def forward(self, *args, **kwargs):
            return self.module(*args, **kwargs)

        @contextlib.contextmanager
        def no_sync(self):
            before, self._sync = self._sync, False
            try:
                yield
            finally:
                self._sync = before

        @torch.no_grad()
        def finish_gradient_synchronization(self) -> None:
            if self._pending is None:
                return
            work, flat, grads = self._pending
            self._pending = None
            work.wait()
            flat /= dist.get_world_size()
            offset = 0
            for g in grads:
                g.copy_(flat[offset:offset + g.numel()].view_as(g))
                offset += g.numel()

        def _on_grad(self, p) -> None:
            if self._sync and not self._queued:  # once per backward, run when the whole backward is done
                self._queued = True
                torch.autograd.Variable._execution_engine.queue_callback(self._launch)

        @torch.no_grad()
        def _launch(self) -> None:
            self._queued = False
            grads = [p.grad for p in self.module.parameters() if p.grad is not None]
            flat = torch.cat([g.reshape(-1) for g in grads])
            self._pending = (dist.all_reduce(flat, async_op=True), flat, grads)

    return PlainDDP(module)
