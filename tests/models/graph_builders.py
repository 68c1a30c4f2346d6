"""Model-sized graphs in the forms ``torch.onnx.export`` writes, built with ``onnx.helper``.

Each builder returns a ``ModelProto`` with random weights from a fixed seed: a BERT-style
encoder layer and a GPT-2-style decoder layer, and whole BERT, GPT-2 and ViT models (the
transformer benchmarks of benchmarks/models.py at real size, tests at tiny size), with a
symbolic batch and sequence axis (shape
subgraphs Shape -> Gather -> Unsqueeze -> Concat -> Reshape, Linear as MatMul + Add with the
bias first, scalar constants as Constant nodes, as the exporter writes them), and a
MobileNetV3-style and a ShuffleNetV2-style block (BatchNorm folded into Conv, as exported in
eval mode).
"""

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FLOAT = TensorProto.FLOAT
INT64 = TensorProto.INT64
OPSET = 17
FLOAT_MIN = float(np.finfo(np.float32).min)  # PyTorch's mask fill value


class GraphBuilder:
    """Collects nodes and initializers; each method adds one exporter-style pattern and returns
    the name of its output."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes = []
        self.initializers = []
        self._count = {}

    def _name(self, stem):
        n = self._count.get(stem, 0)
        self._count[stem] = n + 1
        return f"/{stem}_{n}"

    def node(self, op_type, inputs, num_outputs=1, **attrs):
        name = self._name(op_type)
        outputs = [f"{name}_output_{i}" for i in range(num_outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, outputs, name=name, **attrs))
        return outputs[0] if num_outputs == 1 else outputs

    def const(self, value, dtype=np.float32):
        """A Constant node, as the exporter writes scalars and shape pieces."""
        tensor = numpy_helper.from_array(np.asarray(value, dtype), self._name("const"))
        return self.node("Constant", [], value=tensor)

    def weight(self, name, shape, scale=None, offset=0.0):
        scale = 1.0 / math.sqrt(shape[0]) if scale is None else scale
        array = (offset + scale * self.rng.standard_normal(shape)).astype(np.float32)
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    # ---- transformer pieces ----

    def linear(self, x, prefix, n_in, n_out):
        """torch.nn.Linear: MatMul(x, W^T) then Add(bias, ...)."""
        w = self.weight(f"{prefix}.weight_T", (n_in, n_out))
        b = self.weight(f"{prefix}.bias", (n_out,), scale=0.1)
        return self.node("Add", [b, self.node("MatMul", [x, w])])

    def dim(self, x, axis):
        """Shape -> Gather(axis) -> Unsqueeze(0): one dim of ``x`` as a 1-D int64 tensor."""
        d = self.node("Gather", [self.node("Shape", [x]), self.const(axis, np.int64)], axis=0)
        return self.node("Unsqueeze", [d, self.const([0], np.int64)])

    def concat_shape(self, *pieces):
        """Concat of 1-D int64 pieces; ints become Constant nodes."""
        parts = [self.const([p], np.int64) if isinstance(p, int) else p for p in pieces]
        return self.node("Concat", parts, axis=0)

    def split_heads(self, x, batch, seq, heads, head_dim, perm):
        shape = self.concat_shape(batch, seq, heads, head_dim)
        return self.node("Transpose", [self.node("Reshape", [x, shape])], perm=perm)

    def merge_heads(self, x, batch, seq, hidden):
        x = self.node("Transpose", [x], perm=[0, 2, 1, 3])
        return self.node("Reshape", [x, self.concat_shape(batch, seq, hidden)])

    def layer_norm(self, x, prefix, hidden, form):
        gamma = self.weight(f"{prefix}.weight", (hidden,), scale=0.1, offset=1.0)
        beta = self.weight(f"{prefix}.bias", (hidden,), scale=0.1)
        if form == "fused":
            return self.node("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=1e-5)
        # The decomposed form older exporters and hand-written LayerNorms give.
        mean = self.node("ReduceMean", [x], axes=[-1], keepdims=1)
        d = self.node("Sub", [x, mean])
        var = self.node("ReduceMean", [self.node("Pow", [d, self.const(2.0)])], axes=[-1],
                        keepdims=1)
        std = self.node("Sqrt", [self.node("Add", [var, self.const(1e-5)])])
        y = self.node("Mul", [self.node("Div", [d, std]), gamma])
        return self.node("Add", [y, beta])

    def gelu(self, x, form):
        if form == "erf":  # torch.nn.GELU(): x * 0.5 * (1 + erf(x / sqrt(2)))
            e = self.node("Erf", [self.node("Div", [x, self.const(math.sqrt(2.0))])])
            y = self.node("Mul", [x, self.node("Add", [e, self.const(1.0)])])
            return self.node("Mul", [y, self.const(0.5)])
        # GPT-2's gelu_new: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
        half = self.node("Mul", [self.const(0.5), x])
        cube = self.node("Mul", [self.const(0.044715), self.node("Pow", [x, self.const(3.0)])])
        inner = self.node("Mul", [self.const(math.sqrt(2.0 / math.pi)),
                                  self.node("Add", [x, cube])])
        return self.node("Mul", [half, self.node("Add", [self.const(1.0),
                                                         self.node("Tanh", [inner])])])

    def model(self, inputs, outputs, name):
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="pytorch")
        # The lowest IR version of the opset, as an exporter writes, not the installed onnx's
        # newest (which an older onnxruntime refuses to load).
        model.ir_version = helper.find_min_ir_version_for(list(model.opset_import))
        onnx.checker.check_model(model, full_check=True)
        return model


def _bert_layer(g, x, additive, batch, seq, hidden, heads, ffn, ln, gelu, prefix=""):
    """One post-LN BERT encoder layer on ``x`` [batch, seq, hidden]; ``additive`` is the
    attention mask as an additive term broadcast to the scores."""
    head_dim = hidden // heads
    q = g.split_heads(g.linear(x, f"{prefix}attention.self.query", hidden, hidden), batch, seq,
                      heads, head_dim, [0, 2, 1, 3])
    k = g.split_heads(g.linear(x, f"{prefix}attention.self.key", hidden, hidden), batch, seq,
                      heads, head_dim, [0, 2, 3, 1])
    v = g.split_heads(g.linear(x, f"{prefix}attention.self.value", hidden, hidden), batch, seq,
                      heads, head_dim, [0, 2, 1, 3])
    scores = g.node("Div", [g.node("MatMul", [q, k]), g.const(math.sqrt(head_dim))])
    probs = g.node("Softmax", [g.node("Add", [scores, additive])], axis=-1)
    context = g.merge_heads(g.node("MatMul", [probs, v]), batch, seq, hidden)
    attn_out = g.linear(context, f"{prefix}attention.output.dense", hidden, hidden)
    h = g.layer_norm(g.node("Add", [attn_out, x]), f"{prefix}attention.output.LayerNorm",
                     hidden, ln)
    inter = g.gelu(g.linear(h, f"{prefix}intermediate.dense", hidden, ffn), gelu)
    out = g.node("Add", [g.linear(inter, f"{prefix}output.dense", ffn, hidden), h])
    return g.layer_norm(out, f"{prefix}output.LayerNorm", hidden, ln)


def _bert_mask(g, attn, batch, seq, mask):
    """The additive attention mask from ``attn`` [batch, seq] int64 (1 = token)."""
    m = g.node("Unsqueeze", [g.node("Unsqueeze", [attn, g.const([1], np.int64)]),
                             g.const([2], np.int64)])  # [batch, 1, 1, seq]
    if mask == "cast":
        m = g.node("Cast", [m], to=FLOAT)
        return g.node("Mul", [g.node("Sub", [g.const(1.0), m]), g.const(FLOAT_MIN)])
    is_pad = g.node("Equal", [m, g.const(0, np.int64)])
    additive = g.node("Where", [is_pad, g.const(FLOAT_MIN), g.const(0.0)])
    return g.node("Expand", [additive, g.concat_shape(batch, 1, seq, seq)])


def _output(g, out, name="output"):
    g.nodes.append(helper.make_node("Identity", [out], [name], name=f"/{name}_Identity"))


def bert_encoder_layer(ln="fused", gelu="erf", mask="cast", hidden=64, heads=4, ffn=256,
                       seed=0):
    """A BERT encoder layer: inputs ``hidden_states`` [batch, seq, hidden] float and
    ``attention_mask`` [batch, seq] int64 (1 = token, 0 = padding); output ``output``.

    ``mask="cast"``: HF's extended mask, (1 - Cast(mask)) * finfo.min; ``mask="where"``:
    Where(Equal(mask, 0), finfo.min, 0) expanded to [batch, 1, seq, seq] through a shape
    subgraph.  ``ln``: "fused" LayerNormalization or "decomposed" ReduceMean/Sub/Pow/Sqrt/Div;
    ``gelu``: "erf" or "tanh" form.
    """
    g = GraphBuilder(seed)
    x, attn = "hidden_states", "attention_mask"
    batch, seq = g.dim(x, 0), g.dim(x, 1)
    additive = _bert_mask(g, attn, batch, seq, mask)
    _output(g, _bert_layer(g, x, additive, batch, seq, hidden, heads, ffn, ln, gelu))
    return g.model(
        [helper.make_tensor_value_info(x, FLOAT, ["batch", "seq", hidden]),
         helper.make_tensor_value_info(attn, INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("output", FLOAT, ["batch", "seq", hidden])],
        "bert_layer")


def bert_model(layers=12, hidden=768, heads=12, ffn=3072, vocab=30522, max_pos=512,
               batch="batch", seq="seq", ln="fused", mask="cast", seed=0):
    """BERT (base by default) as HF's BertModel exports: inputs ``input_ids`` and
    ``attention_mask`` [batch, seq] int64; word + position + token-type embeddings,
    LayerNorm, ``layers`` encoder layers (erf GELU); output ``output`` (the last hidden
    state).  ``batch`` / ``seq`` are ints for fixed dims or names for symbolic ones."""
    g = GraphBuilder(seed)
    ids, attn = "input_ids", "attention_mask"
    b, s = g.dim(ids, 0), g.dim(ids, 1)
    seq_scalar = g.node("Gather", [g.node("Shape", [ids]), g.const(1, np.int64)], axis=0)
    positions = g.node("Unsqueeze", [
        g.node("Range", [g.const(0, np.int64), seq_scalar, g.const(1, np.int64)]),
        g.const([0], np.int64)])
    words = g.node("Gather", [g.weight("embeddings.word_embeddings.weight", (vocab, hidden),
                                       scale=0.05), ids])
    pos = g.node("Gather", [g.weight("embeddings.position_embeddings.weight",
                                     (max_pos, hidden), scale=0.05), positions])
    token_type = g.node("Gather", [g.weight("embeddings.token_type_embeddings.weight",
                                            (2, hidden), scale=0.05),
                                   g.node("ConstantOfShape", [g.node("Shape", [ids])],
                                          value=helper.make_tensor("value", INT64, [1], [0]))])
    x = g.node("Add", [g.node("Add", [words, token_type]), pos])
    x = g.layer_norm(x, "embeddings.LayerNorm", hidden, ln)
    additive = _bert_mask(g, attn, b, s, mask)
    for i in range(layers):
        x = _bert_layer(g, x, additive, b, s, hidden, heads, ffn, ln, "erf",
                        f"encoder.layer.{i}.")
    _output(g, x)
    return g.model(
        [helper.make_tensor_value_info(ids, INT64, [batch, seq]),
         helper.make_tensor_value_info(attn, INT64, [batch, seq])],
        [helper.make_tensor_value_info("output", FLOAT, [batch, seq, hidden])], "bert")


def _causal_scores(g, scores, seq, seq_scalar, causal):
    """Scores with the future masked out, as GPT-2's exports write it."""
    if causal == "trilu":
        ones = g.node("ConstantOfShape", [g.concat_shape(seq, seq)],
                      value=helper.make_tensor("value", TensorProto.BOOL, [1], [True]))
        allowed = g.node("Trilu", [ones], upper=0)
        return g.node("Where", [allowed, scores, g.const(FLOAT_MIN)])
    r = g.node("Range", [g.const(0, np.int64), seq_scalar, g.const(1, np.int64)])
    rows = g.node("Unsqueeze", [r, g.const([1], np.int64)])
    cols = g.node("Unsqueeze", [r, g.const([0], np.int64)])
    future = g.node("Less", [rows, cols])
    return g.node("Where", [future, g.const(FLOAT_MIN), scores])


def _gpt2_block(g, x, batch, seq, seq_scalar, hidden, heads, causal, prefix=""):
    """One pre-LN GPT-2 block (c_attn split into q/k/v, causal mask, tanh GELU MLP)."""
    head_dim = hidden // heads
    h = g.layer_norm(x, f"{prefix}ln_1", hidden, "fused")
    qkv = g.linear(h, f"{prefix}attn.c_attn", hidden, 3 * hidden)
    q, k, v = g.node("Split", [qkv, g.const([hidden] * 3, np.int64)], num_outputs=3, axis=2)
    q = g.split_heads(q, batch, seq, heads, head_dim, [0, 2, 1, 3])
    k = g.split_heads(k, batch, seq, heads, head_dim, [0, 2, 3, 1])
    v = g.split_heads(v, batch, seq, heads, head_dim, [0, 2, 1, 3])
    scores = g.node("Div", [g.node("MatMul", [q, k]), g.const(math.sqrt(head_dim))])
    probs = g.node("Softmax", [_causal_scores(g, scores, seq, seq_scalar, causal)], axis=-1)
    context = g.merge_heads(g.node("MatMul", [probs, v]), batch, seq, hidden)
    x = g.node("Add", [x, g.linear(context, f"{prefix}attn.c_proj", hidden, hidden)])
    h = g.layer_norm(x, f"{prefix}ln_2", hidden, "fused")
    h = g.gelu(g.linear(h, f"{prefix}mlp.c_fc", hidden, 4 * hidden), "tanh")
    return g.node("Add", [x, g.linear(h, f"{prefix}mlp.c_proj", 4 * hidden, hidden)])


def _gpt2_embeddings(g, ids, vocab, hidden, max_pos):
    """(token + position embeddings of ``ids``, the sequence length as a scalar): Gather of
    wte by the ids, of wpe by Range(0, seq) unsqueezed, added."""
    seq_scalar = g.node("Gather", [g.node("Shape", [ids]), g.const(1, np.int64)], axis=0)
    wte = g.weight("wte.weight", (vocab, hidden), scale=0.5)
    wpe = g.weight("wpe.weight", (max_pos, hidden), scale=0.1)
    positions = g.node("Range", [g.const(0, np.int64), seq_scalar, g.const(1, np.int64)])
    pos = g.node("Unsqueeze", [positions, g.const([0], np.int64)])
    return g.node("Add", [g.node("Gather", [wte, ids]), g.node("Gather", [wpe, pos])]), seq_scalar


def gpt2_model(layers=12, hidden=768, heads=12, vocab=50257, max_pos=1024, causal="trilu",
               batch="batch", seq="seq", final_ln=True, seed=1):
    """GPT-2 (small by default) with its embeddings: input ``input_ids`` [batch, seq] int64,
    output ``output`` [batch, seq, hidden].  Token and position embeddings (Gather, positions
    from Range), ``layers`` blocks, then (``final_ln``) ln_f."""
    g = GraphBuilder(seed)
    ids = "input_ids"
    b, s = g.dim(ids, 0), g.dim(ids, 1)
    x, seq_scalar = _gpt2_embeddings(g, ids, vocab, hidden, max_pos)
    for i in range(layers):
        x = _gpt2_block(g, x, b, s, seq_scalar, hidden, heads, causal,
                        f"h.{i}." if layers > 1 else "")
    if final_ln:
        x = g.layer_norm(x, "ln_f", hidden, "fused")
    _output(g, x)
    return g.model(
        [helper.make_tensor_value_info(ids, INT64, [batch, seq])],
        [helper.make_tensor_value_info("output", FLOAT, [batch, seq, hidden])],
        "gpt2_layer" if layers == 1 else "gpt2")


def gpt2_decoder_layer(causal="trilu", hidden=64, heads=4, vocab=100, max_pos=32, seed=1):
    """A GPT-2 block with its embeddings: input ``input_ids`` [batch, seq] int64, output
    ``output`` [batch, seq, hidden].

    Token and position embeddings (Gather, positions from Range), LayerNorm before attention
    and MLP, c_attn as one MatMul split into q/k/v, a causal mask applied with Where:
    ``causal="trilu"`` builds it as Trilu(ConstantOfShape([seq, seq], true)) and
    ``causal="range"`` as Less(Range(seq)[:, None], Range(seq)[None, :]); MLP with the Tanh
    form of GELU.
    """
    return gpt2_model(1, hidden, heads, vocab, max_pos, causal, final_ln=False, seed=seed)


def vit_model(layers=12, hidden=768, heads=12, ffn=3072, image=224, patch=16, classes=1000,
              batch="batch", ln="fused", seed=5):
    """ViT-B/16 (by default) as timm / HF export it: input ``pixel_values`` [batch, 3,
    image, image]; patch embedding as a Conv of stride ``patch``, Flatten + Transpose to
    tokens, a class token Expand-ed to the batch and concatenated, position embeddings,
    ``layers`` pre-LN encoder blocks (no mask, erf GELU), LayerNorm, the class token's row
    through the head: output ``output`` [batch, classes]."""
    g = GraphBuilder(seed)
    px = "pixel_values"
    tokens = (image // patch) ** 2 + 1
    head_dim = hidden // heads
    w = g.weight("patch_embed.proj.weight", (hidden, 3, patch, patch),
                 scale=1.0 / math.sqrt(3 * patch * patch))
    x = g.node("Conv", [px, w, g.weight("patch_embed.proj.bias", (hidden,), scale=0.1)],
               kernel_shape=[patch, patch], strides=[patch, patch])
    b = g.dim(px, 0)
    # x.flatten(2).transpose(1, 2): [batch, hidden, h, w] -> [batch, h * w, hidden]
    x = g.node("Transpose", [g.node("Reshape", [x, g.concat_shape(b, hidden, -1)])],
               perm=[0, 2, 1])
    cls = g.node("Expand", [g.weight("cls_token", (1, 1, hidden), scale=0.02),
                            g.concat_shape(b, 1, hidden)])
    x = g.node("Concat", [cls, x], axis=1)
    x = g.node("Add", [x, g.weight("pos_embed", (1, tokens, hidden), scale=0.02)])
    seq = g.const([tokens], np.int64)
    for i in range(layers):
        p = f"blocks.{i}."
        h = g.layer_norm(x, f"{p}norm1", hidden, ln)
        q = g.split_heads(g.linear(h, f"{p}attn.q", hidden, hidden), b, seq, heads, head_dim,
                          [0, 2, 1, 3])
        k = g.split_heads(g.linear(h, f"{p}attn.k", hidden, hidden), b, seq, heads, head_dim,
                          [0, 2, 3, 1])
        v = g.split_heads(g.linear(h, f"{p}attn.v", hidden, hidden), b, seq, heads, head_dim,
                          [0, 2, 1, 3])
        scores = g.node("Mul", [g.node("MatMul", [q, k]), g.const(1.0 / math.sqrt(head_dim))])
        probs = g.node("Softmax", [scores], axis=-1)
        context = g.merge_heads(g.node("MatMul", [probs, v]), b, seq, hidden)
        x = g.node("Add", [x, g.linear(context, f"{p}attn.proj", hidden, hidden)])
        h = g.layer_norm(x, f"{p}norm2", hidden, ln)
        h = g.gelu(g.linear(h, f"{p}mlp.fc1", hidden, ffn), "erf")
        x = g.node("Add", [x, g.linear(h, f"{p}mlp.fc2", ffn, hidden)])
    x = g.layer_norm(x, "norm", hidden, ln)
    first = g.node("Gather", [x, g.const(0, np.int64)], axis=1)  # the class token's row
    _output(g, g.linear(first, "head", hidden, classes))
    return g.model(
        [helper.make_tensor_value_info(px, FLOAT, [batch, 3, image, image])],
        [helper.make_tensor_value_info("output", FLOAT, [batch, classes])], "vit")


# ---- CNN blocks ----

def _conv(g, x, prefix, c_in, c_out, kernel=1, group=1, stride=1):
    """Conv with bias (BatchNorm folded in, as exported in eval mode)."""
    w = g.weight(f"{prefix}.weight", (c_out, c_in // group, kernel, kernel),
                 scale=1.0 / math.sqrt(c_in // group * kernel * kernel))
    b = g.weight(f"{prefix}.bias", (c_out,), scale=0.1)
    pad = kernel // 2
    return g.node("Conv", [x, w, b], kernel_shape=[kernel, kernel], pads=[pad] * 4,
                  strides=[stride, stride], group=group, dilations=[1, 1])


def _conv_bn(g, x, prefix, c_in, c_out, kernel=3, stride=1):
    """Conv without bias then BatchNormalization, as torchvision's ResNet exports in eval
    mode (the engine folds the BN into the Conv)."""
    w = g.weight(f"{prefix}.weight", (c_out, c_in, kernel, kernel),
                 scale=math.sqrt(2.0 / (c_in * kernel * kernel)))
    pad = kernel // 2
    y = g.node("Conv", [x, w], kernel_shape=[kernel, kernel], pads=[pad] * 4,
               strides=[stride, stride])
    scale = g.weight(f"{prefix}.bn.weight", (c_out,), scale=0.1, offset=1.0)
    bias = g.weight(f"{prefix}.bn.bias", (c_out,), scale=0.1)
    mean = g.weight(f"{prefix}.bn.running_mean", (c_out,), scale=0.1)
    var = g.weight(f"{prefix}.bn.running_var", (c_out,), scale=0.1, offset=1.0)
    return g.node("BatchNormalization", [y, scale, bias, mean, var], epsilon=1e-5)


def resnet_block(channels=32, size=14, batch=1, seed=4):
    """A Conv-BN-Relu stem then a ResNet basic block: Conv-BN-Relu, Conv-BN, Add of the
    block's input, Relu.  Input ``input`` [batch, channels, size, size], output ``output``."""
    g = GraphBuilder(seed)
    x = g.node("Relu", [_conv_bn(g, "input", "stem", channels, channels)])
    h = g.node("Relu", [_conv_bn(g, x, "layer1.0.conv1", channels, channels)])
    h = _conv_bn(g, h, "layer1.0.conv2", channels, channels)
    out = g.node("Relu", [g.node("Add", [h, x])])
    g.nodes.append(helper.make_node("Identity", [out], ["output"], name="/output_Identity"))
    shape = [batch, channels, size, size]
    return g.model([helper.make_tensor_value_info("input", FLOAT, shape)],
                   [helper.make_tensor_value_info("output", FLOAT, shape)], "resnet_block")


def mobilenetv3_block(channels=24, expand=72, squeeze=24, size=14, batch=1, seed=2):
    """A 1x1 Conv-HardSwish stem (the previous layer, so the residual reads a convolution's
    output) then a MobileNetV3 inverted residual with squeeze-excite (stride 1, HardSwish):
    input ``input`` [batch, channels, size, size], output ``output`` of the same shape."""
    g = GraphBuilder(seed)
    x = g.node("HardSwish", [_conv(g, "input", "stem", channels, channels)])
    h = g.node("HardSwish", [_conv(g, x, "block.0", channels, expand)])
    h = g.node("HardSwish", [_conv(g, h, "block.1", expand, expand, kernel=3, group=expand)])
    s = g.node("GlobalAveragePool", [h])
    s = g.node("Relu", [_conv(g, s, "block.2.fc1", expand, squeeze)])
    s = g.node("HardSigmoid", [_conv(g, s, "block.2.fc2", squeeze, expand)],
               alpha=1.0 / 6.0, beta=0.5)
    h = g.node("Mul", [s, h])
    out = g.node("Add", [_conv(g, h, "block.3", expand, channels), x])
    g.nodes.append(helper.make_node("Identity", [out], ["output"], name="/output_Identity"))
    shape = [batch, channels, size, size]
    return g.model([helper.make_tensor_value_info("input", FLOAT, shape)],
                   [helper.make_tensor_value_info("output", FLOAT, shape)], "mobilenetv3_block")


def shufflenetv2_block(split="split", channels=48, size=14, batch=1, seed=3):
    """A 1x1 Conv-Relu stem (the previous layer, so the first unit reads a convolution's
    output) then two ShuffleNetV2 units (stride 1): x1, x2 = chunk(x, 2, dim=1) by ``split``
    ("split" or "slice"); branch2 = 1x1 Conv-Relu, 3x3 depthwise Conv, 1x1 Conv-Relu on x2;
    Concat(x1, branch2); channel shuffle as Reshape -> Transpose -> Reshape.  The second unit
    reads the first's shuffled output, so the shuffle sits between convolutions."""
    g = GraphBuilder(seed)
    half = channels // 2
    x = g.node("Relu", [_conv(g, "input", "stem", channels, channels)])
    for unit in range(2):
        if split == "split":
            x1, x2 = g.node("Split", [x, g.const([half, half], np.int64)], num_outputs=2,
                            axis=1)
        else:
            axes = g.const([1], np.int64)
            x1 = g.node("Slice", [x, g.const([0], np.int64), g.const([half], np.int64), axes])
            x2 = g.node("Slice", [x, g.const([half], np.int64),
                                  g.const([channels], np.int64), axes])
        p = f"stage.{unit}.branch2"
        b = g.node("Relu", [_conv(g, x2, f"{p}.0", half, half)])
        b = _conv(g, b, f"{p}.3", half, half, kernel=3, group=half)
        b = g.node("Relu", [_conv(g, b, f"{p}.5", half, half)])
        y = g.node("Concat", [x1, b], axis=1)
        y = g.node("Reshape", [y, g.const([batch, 2, half, size, size], np.int64)])
        y = g.node("Transpose", [y], perm=[0, 2, 1, 3, 4])
        x = g.node("Reshape", [y, g.const([batch, channels, size, size], np.int64)])
    g.nodes.append(helper.make_node("Identity", [x], ["output"], name="/output_Identity"))
    shape = [batch, channels, size, size]
    return g.model([helper.make_tensor_value_info("input", FLOAT, shape)],
                   [helper.make_tensor_value_info("output", FLOAT, shape)],
                   "shufflenetv2_block")


# ---- HF transformers 5 GPT-2 as torch.onnx.export (TorchScript, opset 17) writes it ----


def _own_dims(g, x, *keep):
    """Concat(dims ``keep`` of ``x`` read by Shape / Gather / Unsqueeze, ...): the exporter's
    shape pieces taken from the value being reshaped itself."""
    shape = g.node("Shape", [x])
    return [g.node("Unsqueeze", [g.node("Gather", [shape, g.const(k, np.int64)], axis=0),
                                 g.const([0], np.int64)]) for k in keep]


def _conv1d(g, x, prefix, n_in, n_out):
    """HF's Conv1D: Reshape(x, (-1, n_in)), Gemm(W, b), Reshape back to x's leading dims."""
    w = g.weight(f"{prefix}.weight", (n_in, n_out))
    b = g.weight(f"{prefix}.bias", (n_out,), scale=0.1)
    flat = g.node("Reshape", [x, g.const([-1, n_in], np.int64)])
    lead = _own_dims(g, x, 0, 1)
    y = g.node("Gemm", [flat, w, b], alpha=1.0, beta=1.0, transB=0)
    return g.node("Reshape", [y, g.node("Concat", [*lead, g.const([n_out], np.int64)],
                                        axis=0)])


def _hf_causal_padding_mask(g, ids, attn):
    """transformers 5's SDPA mask: LessOrEqual(key index, query index) (Ranges unsqueezed one
    axis at a time), And a True scalar, And the padding (attention_mask as bool), Expand to
    (B, 1, S, T), then Where(mask, 0, -inf) as an additive mask."""
    def index(of, axis, inserted):
        n = g.node("Gather", [g.node("Shape", [of]), g.const(axis, np.int64)], axis=0)
        r = g.node("Range", [g.const(0, np.int64), n, g.const(1, np.int64)])
        for a in inserted:
            r = g.node("Unsqueeze", [r, g.const([a], np.int64)])
        return r

    kv, q = index(attn, 1, (0, 1, 2)), index(ids, 1, (0, 1, 3))
    true = g.node("ConstantOfShape", [g.const(np.zeros(0, np.int64), np.int64)],
                  value=helper.make_tensor("value", TensorProto.BOOL, [1], [True]))
    causal = g.node("And", [true, g.node("LessOrEqual", [kv, q])])
    padding = g.node("Reshape", [g.node("Cast", [attn], to=TensorProto.BOOL),
                                 g.concat_shape(g.dim(attn, 0), 1, 1, -1)])
    mask = g.node("Expand", [g.node("And", [causal, padding]),
                             g.concat_shape(g.dim(ids, 0), 1, g.dim(ids, 1), g.dim(attn, 1))])
    return g.node("Where", [mask, g.const([0.0]), g.const([-math.inf])])


def _hf_gpt2_block(g, x, additive, hidden, heads, prefix):
    d = hidden // heads
    h = g.layer_norm(x, f"{prefix}ln_1", hidden, "fused")
    qkv = _conv1d(g, h, f"{prefix}attn.c_attn", hidden, 3 * hidden)
    q, k, v = g.node("Split", [qkv, g.const([hidden] * 3, np.int64)], num_outputs=3, axis=2)

    def split(t):
        shape = g.node("Concat", [*_own_dims(g, t, 0, 1), g.const([heads], np.int64),
                                  g.const([d], np.int64)], axis=0)
        return g.node("Transpose", [g.node("Reshape", [t, shape])], perm=[0, 2, 1, 3])

    root = g.const([d ** -0.25])  # SDPA's scale, a square root on each of Q and K^T
    q4 = g.node("Mul", [split(q), root])
    kt = g.node("Mul", [g.node("Transpose", [split(k)], perm=[0, 1, 3, 2]), root])
    probs = g.node("Softmax", [g.node("Add", [g.node("MatMul", [q4, kt]), additive])],
                   axis=-1)
    probs = g.node("Where", [g.node("IsNaN", [probs]), g.const([0.0]), probs])
    y = g.node("Transpose", [g.node("MatMul", [probs, split(v)])], perm=[0, 2, 1, 3])
    y = g.node("Reshape", [y, g.node("Concat", [*_own_dims(g, y, 0, 1),
                                                g.const([-1], np.int64)], axis=0)])
    x = g.node("Add", [x, _conv1d(g, y, f"{prefix}attn.c_proj", hidden, hidden)])
    h = g.layer_norm(x, f"{prefix}ln_2", hidden, "fused")
    h = g.gelu(_conv1d(g, h, f"{prefix}mlp.c_fc", hidden, 4 * hidden), "tanh")
    return g.node("Add", [x, _conv1d(g, h, f"{prefix}mlp.c_proj", 4 * hidden, hidden)])


def hf_gpt2_model(layers=2, hidden=64, heads=4, vocab=100, max_pos=128, seed=1):
    """GPT-2 as HF transformers 5 (SDPA attention) exported by torch.onnx.export with the
    TorchScript exporter writes it: Conv1D as Reshape / Gemm / Reshape, head split and merge
    reshaped by the values' own Shape, the causal and padding mask combined by And into a
    -inf additive mask, the NaN guard after the softmax.  Inputs input_ids and
    attention_mask [batch, seq] int64; output ``output`` [batch, seq, hidden]."""
    g = GraphBuilder(seed)
    ids, attn = "input_ids", "attention_mask"
    x, _ = _gpt2_embeddings(g, ids, vocab, hidden, max_pos)
    additive = _hf_causal_padding_mask(g, ids, attn)
    for i in range(layers):
        x = _hf_gpt2_block(g, x, additive, hidden, heads, f"h.{i}.")
    _output(g, g.layer_norm(x, "ln_f", hidden, "fused"))
    return g.model(
        [helper.make_tensor_value_info(ids, INT64, ["batch", "seq"]),
         helper.make_tensor_value_info(attn, INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("output", FLOAT, ["batch", "seq", hidden])], "gpt2_hf")
