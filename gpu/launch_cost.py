"""The host cost of one ``cuLaunchKernel`` from Python, four ways, for the kernels of one benchmark case.

    python3 gpu/launch_cost.py GROUP INDEX CONFIG [--calls 2000]      # e.g. prefill 1 wgmma@256

A prepared launch (``runtime/driver.py``) passes numba's kernel ABI as one parameter per field (an array is
``5 + 2·ndim`` of them) through a ctypes function with ``argtypes``. This times, per launch, back to back on one
stream, the host's wall clock (a burst of launches without waiting; the median of five bursts) of:

* ``fields, argtypes``: what ``DriverStep.launch`` does;
* ``fields, prebuilt``: the same parameters, the call's fixed arguments as ctypes objects built once (no argtypes,
  so ctypes converts nothing but the stream);
* ``buffer, argtypes``: the parameters as one C struct passed through ``extra`` (``CU_LAUNCH_PARAM_BUFFER_*``);
* ``buffer, prebuilt``: both;

and checks that each gives the outputs bit for bit.
"""

from __future__ import annotations

import argparse
import ctypes
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import prepared_case  # noqa: E402
from call_cost import host_us  # noqa: E402


def variants(step):
    lib = ctypes.CDLL("libcuda.so.1")  # a handle of our own: its functions' argtypes are ours to set
    typed = lib.cuLaunchKernel
    typed.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    typed.restype = ctypes.c_int
    bare = ctypes.CDLL("libcuda.so.1").cuLaunchKernel  # another handle: no argtypes
    bare.restype = ctypes.c_int
    fixed = (ctypes.c_void_p(step.function), *[ctypes.c_uint(v) for v in (*step.grid, *step.block, step.shared)])

    class Params(ctypes.Structure):
        _fields_ = [(f"f{i}", type(f)) for i, f in enumerate(step.fields)]

    params = Params(*[f.value for f in step.fields])
    # the parameters' own extent: the driver checks it against the kernel's, which has no trailing padding
    last = Params._fields_[-1]
    size = ctypes.c_size_t(getattr(Params, last[0]).offset + ctypes.sizeof(last[1]))
    extra = (ctypes.c_void_p * 5)(1, ctypes.addressof(params), 2, ctypes.addressof(size), 0)
    none = ctypes.c_void_p(None)
    stream = torch.cuda.current_stream().cuda_stream

    def check(code):
        if code:
            raise RuntimeError(f"cuLaunchKernel: {code}")

    return {
        "fields, argtypes": lambda: check(typed(*step._fixed, stream, step.params, None)),
        "fields, prebuilt": lambda: check(bare(*fixed, ctypes.c_void_p(stream), step.params, none)),
        "buffer, argtypes": lambda: check(typed(*step._fixed, stream, None, extra)),
        "buffer, prebuilt": lambda: check(bare(*fixed, ctypes.c_void_p(stream), none, extra)),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("group")
    ap.add_argument("index", type=int)
    ap.add_argument("config")
    ap.add_argument("--calls", type=int, default=30, help="launches a burst")
    args = ap.parse_args(argv)
    case, _, _, launch = prepared_case(args.group, args.index, args.config)
    steps = launch.driver
    print(f"{case.name} {case.shape} {case.dtype} {args.config}: {len(steps)} kernel(s), "
          f"{[len(s.fields) for s in steps]} parameters")
    launch.run(torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    expected = {k: torch.as_tensor(v, device="cuda").clone() for k, v in launch.outputs.items()}
    ways = [variants(step) for step in steps]
    for name in ways[0]:
        fns = [w[name] for w in ways]

        def run(fns=fns):
            for fn in fns:
                fn()
        for v in launch.outputs.values():
            torch.as_tensor(v, device="cuda").fill_(-7)
        try:
            run()
        except RuntimeError as err:  # a variant the driver refuses: say so, time the others
            print(f"  {name:18} refused: {err}")
            continue
        torch.cuda.synchronize()
        same = all(torch.equal(torch.as_tensor(launch.outputs[k], device="cuda"), e) for k, e in expected.items())
        print(f"  {name:18} host {host_us(run, args.calls):6.2f} us per call; outputs bit for bit: {same}")
    print(f"  {'prepared run()':18} host {host_us(lambda: launch.run(torch.cuda.current_stream().cuda_stream), args.calls):6.2f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
