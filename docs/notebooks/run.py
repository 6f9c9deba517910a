#!/usr/bin/env python3
"""Runs the notebooks of this directory (or those named) top to bottom in a fresh
"python3" kernel, each in a temporary working directory so that nothing is written beside
them, and fails naming the notebook, the cell and the error when a cell raises.

  run.py [notebook.ipynb ...]   run them (default: every *.ipynb here)
  run.py --write                run them and store each with its outputs, in place
  run.py --check-committed      first check that every code cell of the stored files has
                                outputs (they are committed executed), then run them

The kernel inherits this process's environment: PYTHONPATH must reach ember
(PYTHONPATH=build/python). Exit status: 0 when all passed, 1 when one failed, 77 (CTest's
skip) when nbclient, ipykernel, matplotlib or torch is missing."""

import argparse
import os
import pathlib
import re
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
SKIP = 77


def stored_problems(nb):
    """What is wrong with a stored notebook: code cells without outputs, or with an error."""
    problems = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or not cell.source.strip():
            continue
        if not cell.get("outputs"):
            problems.append(f"cell {index} has no outputs (run.py --write stores them)")
        elif any(out.output_type == "error" for out in cell.outputs):
            problems.append(f"cell {index} holds an error")
        if cell.get("execution_count") is None:
            problems.append(f"cell {index} was not executed")
    return problems


def strip_volatile(nb):
    """Drops what changes from one run to the next but the outputs: timings, the kernel's
    exact version, and where the kernel happened to cut its standard output in pieces
    (consecutive pieces of one stream are joined)."""
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        cell.metadata.pop("collapsed", None)
        if cell.cell_type != "code":
            continue
        outputs = []
        for out in cell.outputs:
            last = outputs[-1] if outputs else None
            if (out.output_type == "stream" and last is not None and last.output_type == "stream"
                    and last.name == out.name):
                last.text += out.text
            else:
                outputs.append(out)
        cell.outputs = outputs
    info = nb.metadata.get("language_info")
    if info is not None:
        nb.metadata["language_info"] = {"name": info.get("name", "python")}
    return nb


def failed_cell(nb):
    """(index, ename, evalue) of the first cell holding an error output, or None."""
    for index, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.output_type == "error":
                return index, out.ename, out.evalue
    return None


def run(path, timeout, write):
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError

    nb = nbformat.read(path, as_version=4)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ember-notebook-") as workdir:
        client = NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                                resources={"metadata": {"path": workdir}})
        try:
            client.execute()
        except CellTimeoutError as e:
            index = next((i for i, c in enumerate(nb.cells)
                          if c.cell_type == "code" and c.get("execution_count") is None), "?")
            print(f"{path.name}: cell {index} timed out after {timeout} s: {e}", file=sys.stderr)
            return False
        except CellExecutionError as e:
            where = failed_cell(nb)
            if where is None:
                print(f"{path.name}: {e}", file=sys.stderr)
            else:
                index, ename, evalue = where
                trace = re.sub(r"\x1b\[[0-9;]*m", "", str(e))  # no terminal colours
                print(f"{path.name}: cell {index} raised {ename}: {evalue}\n{trace}", file=sys.stderr)
            return False
    seconds = time.monotonic() - start
    if write:
        nbformat.write(strip_volatile(nb), path)
    print(f"{path.name}: ok in {seconds:.1f} s{' (written)' if write else ''}")
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=pathlib.Path)
    parser.add_argument("--write", action="store_true", help="store the executed notebooks in place")
    parser.add_argument("--check-committed", action="store_true",
                        help="check that the stored notebooks have their outputs, then run them")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per cell")
    args = parser.parse_args()

    try:
        import nbclient  # noqa: F401
        import nbformat
        import ipykernel  # noqa: F401
        import matplotlib  # noqa: F401
        import torch  # noqa: F401 - attention_dimensions compares with it
    except ImportError as e:
        print(f"notebooks skipped: {e.name} is missing (python3-nbclient python3-ipykernel "
              "python3-matplotlib python3-torch)")
        return SKIP

    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")  # the kernel's debugger, quiet
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # no spinning threads on a busy machine
    paths = [p.resolve() for p in args.notebooks] or sorted(HERE.glob("*.ipynb"))
    if not paths:
        print(f"no notebooks in {HERE}", file=sys.stderr)
        return 1

    ok = True
    if args.check_committed:
        for path in paths:
            for problem in stored_problems(nbformat.read(path, as_version=4)):
                print(f"{path.name}: {problem}", file=sys.stderr)
                ok = False
    for path in paths:
        ok = run(path, args.timeout, args.write) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
