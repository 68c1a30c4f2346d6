"""pplpy as an ONNX backend: ``onnx.backend.base.Backend``, the convention ONNX Runtime's
``onnxruntime.backend`` follows, so tools built on it (onnx's own BackendTest runner among
them) can drive pplpy.

    import pplpy.backend as backend
    rep = backend.prepare(model_proto, "CPU")     # parse, optimise, build once
    outputs = rep.run([x])                         # list of arrays, in the model's output order
    backend.run_node(node_proto, [x, y])           # one node, types taken from the inputs

Only the "CPU" device exists.  ``prepare`` takes the keyword arguments of ``pplpy.load``
(``num_threads``, ``max_isa``, ``fusion`` ...).
"""

import numpy as np
import onnx
from onnx import helper
from onnx.backend.base import Backend, BackendRep, Device, DeviceType

from pplpy.common.data_type import DataType
from pplpy.common.versioned_registry import LATEST_OPSET, normalize_domain
from pplpy.engines.x86.engine import X86Engine
from pplpy.engines.x86.ops.declare import find_op
from pplpy.errors import InputError, ModelError, PplError
from pplpy.models.onnx.model_parser import parse_model
from pplpy.models.onnx.registry import find_parser
from pplpy.plugins import load_plugins
from pplpy.runtime.builder import RuntimeBuilder


class PplpyBackendRep(BackendRep):
    """A prepared model: ``run(inputs)`` with inputs as a list (model input order), a single
    array, or a dict name -> array."""

    def __init__(self, runtime):
        self.runtime = runtime

    def run(self, inputs, **kwargs):
        names = self.runtime.input_names
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            inputs = list(inputs)
            if len(inputs) != len(names):
                raise InputError(f"{len(inputs)} input(s) given for the model's inputs {names}")
            feeds = dict(zip(names, inputs))
        outputs = self.runtime.run(feeds)
        return [outputs[name] for name in self.runtime.output_names]


def _check_device(device):
    if not PplpyBackend.supports_device(device):
        raise PplError(f"pplpy runs on the CPU only; got device {device!r}")


def _as_model(model):
    if isinstance(model, (bytes, bytearray)):
        try:
            model = onnx.load_model_from_string(bytes(model))
        except Exception as exc:  # noqa: BLE001 - any decoding failure is a model problem
            raise ModelError(f"not a readable ONNX model: {exc}") from exc
    if not isinstance(model, onnx.ModelProto):
        raise ModelError(f"expected an onnx.ModelProto or its bytes, got {type(model).__name__}")
    return model


class PplpyBackend(Backend):
    @classmethod
    def supports_device(cls, device):
        try:
            return Device(device).type == DeviceType.CPU
        except Exception:  # noqa: BLE001 - an unparsable device name is not ours
            return False

    @classmethod
    def is_compatible(cls, model, device="CPU", **kwargs):
        """Whether every node of ``model`` has a pplpy parser and op at its opset."""
        model = _as_model(model)
        opsets = {normalize_domain(o.domain): o.version for o in model.opset_import}
        for node in model.graph.node:
            domain = normalize_domain(node.domain)
            opset = opsets.get(domain)
            if opset is None or find_parser(domain, node.op_type, opset) is None \
                    or find_op(domain, node.op_type, opset) is None:
                return False
        return True

    @classmethod
    def prepare(cls, model, device="CPU", num_threads=None, max_isa=None, fusion=True,
                in_shapes=None, **kwargs):
        _check_device(device)
        load_plugins()
        graph, unparsed = parse_model(_as_model(model))
        engine = X86Engine(max_isa=max_isa, num_threads=num_threads, fusion=fusion)
        builder = RuntimeBuilder(graph, unparsed, engines=[engine], in_shapes=in_shapes)
        return PplpyBackendRep(builder.create_runtime())

    @classmethod
    def run_model(cls, model, inputs, device="CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node, inputs, device="CPU", outputs_info=None, opset_version=None,
                 **kwargs):
        """Run one NodeProto on ``inputs`` (arrays for its non-empty inputs, in order)."""
        _check_device(device)
        present = [name for name in node.input if name]
        inputs = [np.asarray(v) for v in inputs]
        if len(inputs) != len(present):
            raise InputError(f"node {node.op_type} has {len(present)} input(s), got "
                             f"{len(inputs)} array(s)")
        value_infos = []
        for name, value in zip(present, inputs):
            data_type = DataType.from_numpy(value.dtype)
            if data_type is None:
                raise InputError(f'input "{name}": element type {value.dtype} is not one pplpy '
                                 f"knows")
            value_infos.append(helper.make_tensor_value_info(name, data_type.value, value.shape))
        outputs = [helper.make_tensor_value_info(name, 0, None) for name in node.output if name]
        graph = helper.make_graph([node], f"{node.op_type}_node", value_infos, outputs)
        domain = normalize_domain(node.domain)
        opsets = [helper.make_opsetid("", opset_version or LATEST_OPSET)]
        if domain:
            opsets.append(helper.make_opsetid(domain, opset_version or 1))
        model = helper.make_model(graph, opset_imports=opsets)
        return cls.run_model(model, inputs, device, **kwargs)


prepare = PplpyBackend.prepare
run_model = PplpyBackend.run_model
run_node = PplpyBackend.run_node
supports_device = PplpyBackend.supports_device
is_compatible = PplpyBackend.is_compatible
