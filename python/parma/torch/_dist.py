"""parma beside ``torch.distributed``: one parma node per torch process."""

from __future__ import annotations

import os
import secrets
import socket
from typing import Any, Optional

import torch.distributed as dist

import parma


def start_node(config: parma.Config, **options: Any) -> parma.Node:
    """Starts this process as one parma node of the job that ``torch.distributed`` runs.

    Call it after ``torch.distributed.init_process_group``: the rank and the world size are
    torch's, and rank 0 hands every process the rendezvous address and, unless
    ``PARMA_TOKEN`` or ``PARMA_TOKEN_FILE`` is set, a fresh cluster token, through torch's own
    collectives (``broadcast_object_list``). parma's rendezvous then listens on a free port
    of its own: torch keeps ``MASTER_PORT``. ``options`` are ``parma.start_node``'s
    (``peer_timeout``, ``startup_timeout``, ``transport``, ...). ``config.nodes`` must equal
    the world size.
    """
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(
            "parma.torch.start_node needs torch.distributed: call torch.distributed.init_process_group first "
            "(or use parma.start_node, which reads the launcher's environment)"
        )
    rank, world = dist.get_rank(), dist.get_world_size()
    if config.nodes != world:
        raise ValueError(f"the configuration has {config.nodes} nodes but torch.distributed has {world} processes")
    offer: list[Optional[tuple[str, Optional[str]]]] = [None]
    if rank == 0:
        host = _rendezvous_host()
        bind = "127.0.0.1" if host.startswith("127.") or host == "localhost" else "0.0.0.0"
        port = parma.free_port(bind)
        has_token = bool(os.environ.get("PARMA_TOKEN") or os.environ.get("PARMA_TOKEN_FILE"))
        offer[0] = (f"{host}:{port}", None if has_token else secrets.token_hex(32))
    dist.broadcast_object_list(offer, src=0)
    assert offer[0] is not None
    rendezvous, token = offer[0]
    kw = dict(options)
    if token is not None:
        kw["token"] = token
    node = parma.start_node(config, rank=rank, world=world, rendezvous=rendezvous, **kw)
    assert node is not None
    return node


def _rendezvous_host() -> str:
    """The address the other processes reach rank 0 at: torch's ``MASTER_ADDR``, resolved."""
    host = os.environ.get("MASTER_ADDR", "127.0.0.1")
    try:
        return socket.gethostbyname(host)
    except OSError:
        return host
