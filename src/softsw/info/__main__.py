"""python -m softsw.info [--json]: how this softsw was built, and the GPUs it would run on."""
from __future__ import annotations

import argparse
import json
import sys

import torch

from . import build_info, device_problem


def devices() -> list:
    if not torch.cuda.is_available():
        return []
    found = []
    for index in range(torch.cuda.device_count()):
        major, minor = torch.cuda.get_device_capability(index)
        problem = device_problem(index)
        found.append({
            "index": index,
            "name": torch.cuda.get_device_name(index),
            "capability": f"{major}.{minor}",
            "supported": problem is None,
            "problem": problem,
        })
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m softsw.info", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    info = build_info()
    info["devices"] = devices()
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    width = max(len(key) for key in info)
    for key, value in info.items():
        if key == "devices":
            continue
        if isinstance(value, list):
            value = " ".join(value) or "-"
        print(f"{key:<{width}}  {value if value is not None else '-'}")
    if not info["devices"]:
        print(f"{'devices':<{width}}  - (no CUDA device visible)")
    for device in info["devices"]:
        verdict = "ok" if device["supported"] else f"NOT SUPPORTED: {device['problem']}"
        print(f"{'cuda:' + str(device['index']):<{width}}  {device['name']} "
              f"(compute capability {device['capability']}): {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
