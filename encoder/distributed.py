"""Run one function in N processes joined into one torch.distributed group, and get rank 0's result.

The launcher behind multi-process training (`TrainConfig.nproc`, encoder.training); it knows nothing
of training. `run_in_group` spawns `nproc` workers (start method 'spawn': no forked torch state) that
join one process group through a TCP store the parent holds on 127.0.0.1 at a port the OS picks
(never a fixed one): gloo on CPU, NCCL with one GPU per process. Each worker calls
`target(rank, world, device, send, *args)`; `send(kind, body)` reaches the parent's `on_message`,
and rank 0's return value is the result. A worker's exception (its traceback), a worker that dies,
or silence for `STALL_SECONDS` is a `GroupError` in the parent, which then ends the other workers;
each worker leaves the group in every case, and ends itself when the parent is gone.
"""
from __future__ import annotations

import os
import queue as queue_module
import threading
import time
import traceback
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

__all__ = ["run_in_group", "GroupError", "STALL_SECONDS", "COLLECTIVE_TIMEOUT_SECONDS"]

HOST = "127.0.0.1"
COLLECTIVE_TIMEOUT_SECONDS = 600  # a collective waiting this long for a peer fails instead of hanging
STALL_SECONDS = COLLECTIVE_TIMEOUT_SECONDS + 120  # the parent gives up on workers silent this long
PARENT_POLL_SECONDS = 1.0  # how often a worker checks that its parent is alive


class GroupError(RuntimeError):
    """A worker of `run_in_group` failed, died, or the workers stopped answering."""


def run_in_group(target: Callable[..., Any], args: tuple, *, nproc: int, device_type: str, threads: int,
                 on_message: Callable[[str, Any], None] | None = None, name: str = "worker") -> Any:
    """target(rank, world, device, send, *args) in `nproc` spawned processes of one group (gloo for
    device_type "cpu", NCCL for "cuda": process r on cuda:r), each with `threads` torch threads ->
    rank 0's return value. target and args must pickle (target a module-level function). `name`
    labels the processes and the error messages."""
    if device_type == "cuda":
        backend = "nccl"
        if torch.cuda.device_count() < nproc:
            raise ValueError(f"nproc={nproc} needs {nproc} CUDA devices (one per process), "
                             f"{torch.cuda.device_count()} visible")
    elif device_type == "cpu":
        backend = "gloo"
    else:
        raise ValueError(f"multi-process runs on cpu or cuda, not {device_type}")
    # The parent holds the rendezvous store: the OS picks a free port and no worker races for it.
    store = dist.TCPStore(HOST, 0, nproc + 1, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_SECONDS))
    ctx = mp.get_context("spawn")
    messages = ctx.Queue()
    workers = [ctx.Process(target=_worker, args=(rank, nproc, store.port, backend, device_type, threads, target,
                                                 args, messages, os.getpid()), daemon=True, name=f"{name}-{rank}")
               for rank in range(nproc)]
    done, result = False, None
    try:
        for w in workers:
            w.start()
        last_heard = time.monotonic()
        while not done:
            try:
                kind, rank, body = messages.get(timeout=0.5)
            except queue_module.Empty:
                dead = [(r, w.exitcode) for r, w in enumerate(workers) if w.exitcode is not None and w.exitcode != 0]
                if dead:
                    raise GroupError(", ".join(f"{name} process {r} of {nproc} exited with code {c}" for r, c in dead)
                                     + " before finishing") from None
                if all(w.exitcode is not None for w in workers):
                    raise GroupError(f"the {name} processes exited without a result") from None
                if time.monotonic() - last_heard > STALL_SECONDS:
                    raise GroupError(f"no word from the {name} processes for {STALL_SECONDS} s") from None
                continue
            last_heard = time.monotonic()
            if kind == "error":
                # a peer's death shows up on the others as a broken connection: name the dead one first
                time.sleep(0.2)
                killed = [(r, w.exitcode) for r, w in enumerate(workers) if w.exitcode is not None and w.exitcode < 0]
                first = "".join(f"{name} process {r} of {nproc} exited with code {c}; " for r, c in killed)
                raise GroupError(f"{first}{name} process {rank} of {nproc} failed:\n{body}")
            if kind == "done":
                done, result = True, body
            elif on_message is not None:
                on_message(kind, body)
        for w in workers:
            w.join(timeout=30)
    finally:
        for w in workers:  # on an error, or a worker still alive after the result
            if w.is_alive():
                w.terminate()
                w.join(timeout=5)
            if w.is_alive():
                w.kill()
                w.join()
        messages.close()
        del store
    return result


def _exit_with_parent(parent: int) -> None:
    """Ends this process when `parent` is gone. A parent killed outright (SIGKILL, the OOM killer) cannot end
    its daemon workers: they trained on for good, holding its caller's stdout and stderr open."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_SECONDS)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _worker(rank: int, world: int, port: int, backend: str, device_type: str, threads: int,
            target: Callable[..., Any], args: tuple, messages, parent: int) -> None:
    """One process: join the group, run target, rank 0 sends its value; any exception goes to the
    parent as text, and the group is left in every case."""
    _exit_with_parent(parent)
    try:
        torch.set_num_threads(threads)
        device = torch.device("cuda", rank) if device_type == "cuda" else torch.device("cpu")
        if device.type == "cuda":
            torch.cuda.set_device(device)
        store = dist.TCPStore(HOST, port, world + 1, is_master=False,
                              timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_SECONDS))
        dist.init_process_group(backend, store=store, rank=rank, world_size=world,
                                timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_SECONDS))
        out = target(rank, world, device, lambda kind, body: messages.put((kind, rank, body)), *args)
        if rank == 0:
            messages.put(("done", rank, out))
    except BaseException:  # noqa: BLE001 - everything goes to the parent, which raises it
        messages.put(("error", rank, traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        messages.close()
        messages.join_thread()  # the message is flushed before the process ends
