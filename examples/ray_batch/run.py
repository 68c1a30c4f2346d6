"""Batch inference over a folder of .npy files with Ray Data and pplpy, one runtime per actor.

    python -m examples.ray_batch.run --model m.onnx --inputs in/ --out out/ \\
        --actors 2 --batch-size 8 --threads 1 [--address auto] [--on-error skip]

    driver: read the model once, check it (pplpy.load), ray.put its bytes
    read_binary_files(inputs/*.npy) --blocks of (path, bytes)--> map_batches(Predictor)
        Predictor, one per actor: pplpy.load(model) in __init__ (parse, optimise, pack
        weights: once per actor), then __call__ on each batch of files:
        decode .npy --group by shape, stack--> rt.run --> (path, error, .npy bytes)
    driver: iterate the results as they stream in and write out/<stem>.npy

Each file holds ONE sample: the model input's dims without its leading batch dim.  A model
whose batch dim is free runs a whole batch (of one shape) per call; a model with a fixed
batch dim n runs it n samples at a time.  A model with several outputs gets <stem>.npz.

A bad input file (not a .npy, wrong dtype or shape, or a run that fails) is a pplpy error
whose message starts with the file's path: by default the driver raises it (and stops the
job); with ``on_error="skip"`` the other files are written and the failures returned.
See docs/scale_out.md.
"""

import argparse
import io
import os
import sys
from collections import defaultdict

import numpy as np
import ray

import pplpy


class Predictor:
    """Ray Data's callable class: Ray makes one per actor and calls it on batches, so the
    model is built (parsed, optimised, weights packed) once per actor, not per batch."""

    def __init__(self, model, num_threads=1):
        if isinstance(model, ray.ObjectRef):  # the driver's one copy in the object store
            model = ray.get(model)
        # Actors are separate processes that do not know each other's CPUs: bound, every
        # actor's workers would take the same CPUs of the node.
        self.rt = pplpy.load(model, num_threads=num_threads, bind_threads=False)
        self.input = sample_spec(self.rt)
        self.outputs = [t.name for t in self.rt.outputs]
        lead = self.rt.inputs[0].dims[0]
        self.fixed_batch = lead if isinstance(lead, int) else None  # None: a free batch dim

    def __call__(self, batch):
        paths = [str(p) for p in batch["path"]]
        errors = [""] * len(paths)
        kinds = [""] * len(paths)
        results = [b""] * len(paths)
        groups = defaultdict(list)  # samples of one shape stack into one model batch
        samples = {}
        for i, (path, blob) in enumerate(zip(paths, batch["bytes"])):
            try:
                samples[i] = self._decode(path, blob)
                groups[samples[i].shape].append(i)
            except pplpy.PplError as exc:
                kinds[i], errors[i] = type(exc).__name__, str(exc)
        for indices in groups.values():
            for chunk in self._chunks(indices):
                try:
                    outs = self._run([samples[i] for i in chunk])
                except pplpy.PplError:  # find the culprit: the chunk's samples one by one
                    outs = [self._run_alone(i, paths, samples, kinds, errors) for i in chunk]
                for i, out in zip(chunk, outs):
                    if out is not None:
                        results[i] = encode(out, self.outputs)
        return {"path": np.array(paths, dtype=object),
                "kind": np.array(kinds, dtype=object),
                "error": np.array(errors, dtype=object),
                "result": np.array(results, dtype=object)}

    def _decode(self, path, blob):
        name, dims, dtype = self.input
        try:
            array = np.load(io.BytesIO(bytes(blob)), allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise pplpy.InputError(f"{path}: not a readable .npy file ({exc})") from None
        if not isinstance(array, np.ndarray):  # an .npz archive
            raise pplpy.InputError(f"{path}: an .npz archive; expected one .npy array")
        fits = array.ndim == len(dims) and all(
            not isinstance(d, int) or d == s for d, s in zip(dims, array.shape))
        if array.dtype != dtype or not fits:
            raise pplpy.InputError(
                f'{path}: input "{name}" takes one sample of {dtype} {format_dims(dims)} '
                f"(the model's dims without the batch dim); the file holds {array.dtype} "
                f"{list(array.shape)}")
        return array

    def _chunks(self, indices):
        step = self.fixed_batch or len(indices)
        return [indices[k:k + step] for k in range(0, len(indices), step)]

    def _run(self, samples):
        """Per-sample output dicts of one model run over ``samples`` (padded with copies of
        the last to a fixed batch size, the padding's outputs dropped)."""
        n = len(samples)
        if self.fixed_batch is not None and n < self.fixed_batch:
            samples = samples + [samples[-1]] * (self.fixed_batch - n)
        outs = self.rt.run({self.input[0]: np.stack(samples)})
        return [{k: v[j] for k, v in outs.items()} for j in range(n)]

    def _run_alone(self, i, paths, samples, kinds, errors):
        """Sample i's outputs, or None with its error recorded under its path."""
        try:
            return self._run([samples[i]])[0]
        except pplpy.PplError as exc:
            kinds[i], errors[i] = type(exc).__name__, f"{paths[i]}: {exc}"
            return None


def sample_spec(rt):
    """(input name, dims of one sample, dtype) of a single-input model with a batch dim."""
    if len(rt.inputs) != 1:
        raise pplpy.InputError(f"the model takes {len(rt.inputs)} inputs "
                               f"({[t.name for t in rt.inputs]}); a .npy file feeds one")
    tensor = rt.inputs[0]
    if not tensor.dims:
        raise pplpy.InputError(f'input "{tensor.name}" has no leading batch dim '
                               f"(dims {tensor.dims})")
    return tensor.name, tuple(tensor.dims[1:]), tensor.dtype


def format_dims(dims):
    return "[" + ",".join(str(d) if d is not None else "?" for d in dims) + "]"


def encode(outputs, names):
    """One sample's outputs as file bytes: a .npy for one output, an .npz for several."""
    buffer = io.BytesIO()
    if len(names) == 1:
        np.save(buffer, outputs[names[0]], allow_pickle=False)
    else:
        np.savez(buffer, **{name: outputs[name] for name in names})
    return buffer.getvalue()


def error_class(name):
    """The pplpy error class called ``name`` (an actor sends its name), else PplError."""
    cls = getattr(pplpy, name, None)
    return cls if isinstance(cls, type) and issubclass(cls, pplpy.PplError) else pplpy.PplError


def output_name(path, multiple):
    stem = os.path.splitext(os.path.basename(path))[0]
    return stem + (".npz" if multiple else ".npy")


def run_batch(model, inputs, out, actors=2, batch_size=8, num_threads=1, on_error="raise"):
    """Run ``model`` (a path, or the model's bytes) over every .npy file under ``inputs``
    (a folder or a list of paths/URIs every node can read) on ``actors`` Ray actors and
    write ``out/<stem>.npy`` for each.  Returns {path: message} of the files that failed
    (only with ``on_error="skip"``; "raise" raises the first failure, a pplpy error whose
    message starts with the file's path).  Call ``ray.init`` first (or it starts a local
    Ray instance)."""
    if on_error not in ("raise", "skip"):
        raise ValueError(f'on_error must be "raise" or "skip", got {on_error!r}')
    probe = pplpy.load(model, num_threads=1)  # a bad model fails here, not in N actors
    sample_spec(probe)
    multiple = len(probe.outputs) > 1
    del probe
    if not isinstance(model, bytes):
        with open(model, "rb") as f:  # read here: the model need only be on the driver
            model = f.read()

    # Ship this module's code with the actors (by value), so workers on other nodes need
    # only pplpy and ray installed, not this example; as __main__ it travels so anyway.
    if __name__ != "__main__":
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    # Reading is I/O: it reserves no CPU, so it is not starved when the actors hold them all.
    ds = ray.data.read_binary_files(inputs, include_paths=True, file_extensions=["npy"],
                                    num_cpus=0)
    model_ref = ray.put(model)  # one copy in the object store, held until the job ends
    ds = ds.map_batches(
        Predictor,
        fn_constructor_kwargs={"model": model_ref, "num_threads": num_threads},
        compute=ray.data.ActorPoolStrategy(size=actors),  # a fixed pool of this many
        num_cpus=num_threads,     # Ray reserves as many CPUs as the runtime's thread team
        batch_size=batch_size,
        batch_format="numpy",
    )
    os.makedirs(out, exist_ok=True)
    written, failed = {}, {}
    for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
        for path, kind, error, result in zip(batch["path"], batch["kind"], batch["error"],
                                             batch["result"]):
            if error:
                if on_error == "raise":
                    raise error_class(kind)(error)
                failed[path] = error
                continue
            name = output_name(path, multiple)
            if name in written:
                raise pplpy.InputError(f"{path} and {written[name]} would both write "
                                       f"{name}: give the inputs distinct file names")
            written[name] = path
            with open(os.path.join(out, name), "wb") as f:
                f.write(result)
    return failed


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="ONNX model (read on the driver)")
    parser.add_argument("--inputs", required=True,
                        help="folder of .npy files, one sample each (every node must read it)")
    parser.add_argument("--out", required=True, help="folder for the outputs (on the driver)")
    parser.add_argument("--actors", type=int, default=2, help="actors, one runtime each")
    parser.add_argument("--batch-size", type=int, default=8, help="files per actor call")
    parser.add_argument("--threads", type=int, default=1,
                        help="each runtime's thread team = CPUs Ray reserves per actor")
    parser.add_argument("--address", default=None,
                        help='Ray cluster to join ("auto" or HEAD_IP:6379); default: the '
                             "cluster `ray start` made on this machine, else a new local one")
    parser.add_argument("--on-error", choices=("raise", "skip"), default="raise",
                        help="a bad input file stops the job (raise) or is listed (skip)")
    args = parser.parse_args(argv)
    ray.init(address=args.address)
    try:
        failed = run_batch(args.model, args.inputs, args.out, args.actors, args.batch_size,
                           args.threads, args.on_error)
    except pplpy.PplError as exc:
        print(f"ray_batch: error: {exc}", file=sys.stderr)
        return 2
    finally:
        ray.shutdown()
    for path, message in failed.items():
        print(f"ray_batch: skipped: {message}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
