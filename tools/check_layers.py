#!/usr/bin/env python3
"""check_layers.py - the folders of runtime/, kernels/ and models/ are layers, and includes run down them only.

LAYERS below is where the layers are written down, bottom first. A file may include a header of its own folder
(a folder's subfolders that are not listed themselves belong to it: runtime/distributed/shm is
runtime/distributed) or of a folder in a lower layer; never one of a higher layer, nor of another folder of the
same layer. So the house reads one way: the reducer (runtime/ddp) may use the simulator (runtime/sim) but not
the other way round, and a new folder must be placed here before it builds a test that passes.

    tools/check_layers.py [ROOT]     # exit 0: every include runs down; 1: each one that does not, one a line

ctest runs it as House.IncludesRunDownTheLayers (tests/CMakeLists.txt); README.md, "Layout", points here.
"""
import os
import re
import sys

# Bottom first. A folder may include its own folder and the layers below its own.
LAYERS = [
    ["runtime/core"],                                  # errors, devices, logging, flags
    ["kernels/cpu"],                                   # the CPU kernels
    ["kernels/cuda"],                                  # the CUDA kernels (their CPU twins' headers)
    ["runtime/tensor"],                                # Tensor, Storage
    ["runtime/autograd", "runtime/distributed"],       # the graph; process groups and host collectives
    ["runtime/ops", "runtime/data", "runtime/trace", "runtime/launch"],
    ["runtime/nn", "runtime/sim"],                     # modules; the bucket simulator (and bucket assignment)
    ["runtime/optim"],                                 # SGD, AdamW: no process group beyond their own
    ["runtime/ddp"],                                   # the reducer, DDP, Join, ZeRO-1
    ["runtime/ddp/sharded"],                           # ZeRO-2/3 on the reducer
    ["runtime/checkpoint"],                            # checkpoints of models and (ZeRO) optimizers
    ["models"],                                        # reference models and the training program
]
CHECKED = ("runtime", "kernels", "models")
SOURCE = re.compile(r"\.(h|cpp|cu|cuh)$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"((?:runtime|kernels|models)/[^"]+)"')


def unit_of(path):
    """(layer, folder) of a repository-relative file path: the longest listed folder that contains it."""
    best = None
    for layer, folders in enumerate(LAYERS):
        for folder in folders:
            if (path + "/").startswith(folder + "/") and (best is None or len(folder) > len(best[1])):
                best = (layer, folder)
    return best


def check(root):
    """The lines that break the rule, and folders no layer lists."""
    problems = []
    for top in CHECKED:
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            rel_dir = os.path.relpath(dirpath, root).replace(os.sep, "/")
            if not any(SOURCE.search(f) for f in files):
                continue
            if unit_of(rel_dir) is None:
                problems.append(f"{rel_dir}: a folder of sources that no layer lists (add it to LAYERS in "
                                f"tools/check_layers.py)")
                continue
            for name in sorted(files):
                if not SOURCE.search(name):
                    continue
                rel = f"{rel_dir}/{name}"
                layer, folder = unit_of(rel_dir)
                with open(os.path.join(dirpath, name), encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = m.group(1)
                        got = unit_of(os.path.dirname(target))
                        if got is None:
                            problems.append(f"{rel}:{number} includes {target}, in a folder no layer lists")
                        elif got[1] != folder and got[0] >= layer:
                            problems.append(f"{rel}:{number} includes {target}: {folder} (layer {layer}) may "
                                            f"include only its own folder and layers below it, not {got[1]} "
                                            f"(layer {got[0]})")
    return problems


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print(f"check_layers: {len(problems)} include(s) against the layers (tools/check_layers.py, LAYERS)")
        return 1
    print(f"check_layers: every include of {', '.join(CHECKED)} runs down the {len(LAYERS)} layers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
