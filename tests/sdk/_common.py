"""Shared command-line handling for the SDK client scripts."""

import argparse
import json
import sys

API_KEY = "sk-test-SECRET-do-not-log-0123456789"


def parse_args(description):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--base-url", required=True, help="provider base URL (OpenAI: http://HOST:PORT/v1, Anthropic: http://HOST:PORT)")
    parser.add_argument("--header", action="append", default=[], metavar="K:V", help="extra request header, repeatable")
    parser.add_argument("--model", default=None, help="model name to send")
    args = parser.parse_args()
    headers = {}
    for item in args.header:
        key, sep, value = item.partition(":")
        if not sep:
            parser.error(f"--header needs K:V, got {item!r}")
        headers[key.strip()] = value.strip()
    args.headers = headers
    return args


def with_headers(base, extra):
    """Per-call headers: the script's scenario header plus the --header ones (which win)."""
    merged = dict(base)
    merged.update(extra)
    return merged


def emit(result):
    """Prints one JSON document, keys sorted, so identical runs give identical output."""
    json.dump(result, sys.stdout, sort_keys=True, indent=2)
    sys.stdout.write("\n")
    sys.stdout.flush()
