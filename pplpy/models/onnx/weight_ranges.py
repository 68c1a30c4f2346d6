"""Where a model file keeps its initializers' bytes, so that the weights are read straight
into numpy arrays and protobuf parses the model without them.

``onnx.load`` parses the whole file into one ModelProto, and each initializer's array is
then copied out of its ``raw_data``: the weights twice in memory at the load's peak (912 MB
for BERT-base's 435 MB).  ``scan`` reads the protobuf wire format of the three messages on
the way to the weights -- ``ModelProto.graph`` (field 7), ``GraphProto.initializer`` (5),
``TensorProto.raw_data`` (9) -- and returns the file's bytes with those raw_data fields left
out (the "skeleton", which protobuf parses as usual) and where each one lies in the file.
Everything else is copied byte for byte.  Only raw_data of at least ``MIN_BYTES`` in a type
whose bytes are its numpy array's memory is left out; any wire data it does not expect
(a second graph field, groups, a length past the end, a varint longer than protobuf writes,
a tensor with segments, more than ``MAX_FIELDS`` fields) makes ``scan`` return None, and
the caller then loads the file with ``onnx.load`` as before; so does a file under
``MIN_FILE_BYTES``.

Wire format (protobuf's encoding): each field is a varint key ``number << 3 | wire type``,
then a varint (type 0), 8 bytes (1), a varint length and that many bytes (2), or 4 bytes (5).
"""

import dataclasses
import os

MODEL_GRAPH = 7          # ModelProto.graph
GRAPH_INITIALIZER = 5    # GraphProto.initializer (repeated TensorProto)
TENSOR_DATA_TYPE = 2     # TensorProto.data_type
TENSOR_SEGMENT = 3       # TensorProto.segment (onnx refuses it: left to onnx)
TENSOR_RAW_DATA = 9      # TensorProto.raw_data
TENSOR_EXTERNAL = (13, 14)  # TensorProto.external_data, data_location

# raw_data shorter than this stays in the skeleton: not worth a read of its own.
MIN_BYTES = 4096

# Files smaller than this go to onnx.load: their weights held twice cost little, and the
# scan's Python loop over every field (4 us each) would cost a many-node graph more than
# it saves (5000 nodes: 137 -> 177 ms).
MIN_FILE_BYTES = 16 << 20

# Fields the scan decodes before it leaves the file to onnx.load: a graph has about one
# per node and value, and a file of millions of tiny fields (valid protobuf) would make
# this Python loop slow.
MAX_FIELDS = 200_000

_LENGTH_DELIMITED = 2


class _Unexpected(Exception):
    """Wire data ``scan`` does not handle: the caller falls back to onnx.load."""


@dataclasses.dataclass
class Scan:
    skeleton: bytes  # the file without the left-out raw_data fields
    ranges: list     # per initializer, in order: (offset, length) of its raw_data, or None


def scan(fd, size, direct_types):
    """The skeleton of the binary ModelProto in the open file ``fd`` (``size`` bytes) and its
    initializers' raw_data ranges, or None where the file holds wire data this reader does
    not expect.  ``direct_types``: the TensorProto data types whose raw_data may be left
    out.  Only the blocks holding keys, lengths and the bytes kept in the skeleton are read
    (``_Window``: pread, not a mapping, so a file cut short meanwhile is an early end, not a
    SIGBUS)."""
    if size < MIN_FILE_BYTES:
        return None
    try:
        data = _Window(fd, size)
        reader = _Reader(data)
        pieces, ranges, graphs = [], [], 0
        for number, wire, start, value_start, end in reader.fields(0, size):
            if number == MODEL_GRAPH and wire == _LENGTH_DELIMITED:
                graphs += 1
                if graphs > 1:
                    raise _Unexpected("two graph fields (protobuf merges them)")
                graph = _graph(reader, value_start, end, ranges, direct_types)
                pieces.append(_key(number, wire) + _varint(len(graph)) + graph)
            else:
                pieces.append(data[start:end])
        return Scan(b"".join(pieces), ranges)
    except _Unexpected:
        return None


class _Window:
    """Bytes of an open file by index or slice, read in blocks with os.pread (one block
    kept): the scan reads a few bytes at a time, mostly near each other."""

    BLOCK = 1 << 20

    def __init__(self, fd, size):
        self.fd, self.size = fd, size
        self.start, self.block = 0, b""

    def _read(self, begin, end):
        data = os.pread(self.fd, end - begin, begin)
        if len(data) != end - begin:
            raise _Unexpected("the file ended early")
        return data

    def __getitem__(self, key):
        if isinstance(key, slice):
            begin, end = key.start, key.stop
            if self.start <= begin and end <= self.start + len(self.block):
                return self.block[begin - self.start:end - self.start]
            return self._read(begin, end)
        if not self.start <= key < self.start + len(self.block):
            if key >= self.size:
                raise _Unexpected("the file ended early")
            self.start = key
            self.block = self._read(key, min(self.size, key + self.BLOCK))
        return self.block[key - self.start]


def _graph(reader, begin, end, ranges, direct_types):
    pieces = []
    for number, wire, start, value_start, stop in reader.fields(begin, end):
        if number == GRAPH_INITIALIZER and wire == _LENGTH_DELIMITED:
            tensor, where = _tensor(reader, value_start, stop, direct_types)
            ranges.append(where)
            pieces.append(_key(number, wire) + _varint(len(tensor)) + tensor)
        else:
            pieces.append(reader.data[start:stop])
    return b"".join(pieces)


def _tensor(reader, begin, end, direct_types):
    """A TensorProto's bytes without its raw_data when that may be left out, and where the
    raw_data lies (None when it stays)."""
    data = reader.data
    fields = list(reader.fields(begin, end))
    data_types = [reader.varint(f[3], f[4])[0] for f in fields
                  if f[0] == TENSOR_DATA_TYPE and f[1] == 0]
    raw = [f for f in fields if f[0] == TENSOR_RAW_DATA and f[1] == _LENGTH_DELIMITED]
    leave_out = (len(raw) == 1 and len(data_types) == 1 and data_types[0] in direct_types
                 and raw[0][4] - raw[0][3] >= MIN_BYTES
                 and not any(f[0] in (TENSOR_SEGMENT, *TENSOR_EXTERNAL) for f in fields))
    if not leave_out:
        return data[begin:end], None
    _, _, start, value_start, stop = raw[0]
    return data[begin:start] + data[stop:end], (value_start, stop - value_start)


def _key(number, wire):
    return _varint(number << 3 | wire)


def _varint(value):
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


class _Reader:
    """Fields of a message in a region of the file."""

    def __init__(self, data):
        self.data = data
        self.budget = MAX_FIELDS

    def varint(self, position, end):
        """(value, position after it); a varint protobuf would not write (longer than its
        value needs, or past 64 bits) is unexpected."""
        data, value, shift, first = self.data, 0, 0, position
        while True:
            if position >= end or shift > 63:
                raise _Unexpected("a varint runs past its message")
            byte = data[position]
            position += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                if position - first > 1 and byte == 0:
                    raise _Unexpected("a varint longer than its value needs")
                return value, position

    def fields(self, begin, end):
        """(number, wire type, field start, value start, field end) of each field in
        [begin, end)."""
        position = begin
        while position < end:
            self.budget -= 1
            if self.budget < 0:
                raise _Unexpected(f"more than {MAX_FIELDS} fields")
            key, value_start = self.varint(position, end)
            number, wire = key >> 3, key & 7
            if number == 0 or key >= 1 << 32:
                raise _Unexpected("a field number protobuf does not allow")
            if wire == 0:
                _, stop = self.varint(value_start, end)
            elif wire == 1:
                stop = value_start + 8
            elif wire == _LENGTH_DELIMITED:
                length, value_start = self.varint(value_start, end)
                if length >= 1 << 31:
                    raise _Unexpected("a length past protobuf's 2 GB")
                stop = value_start + length
            elif wire == 5:
                stop = value_start + 4
            else:
                raise _Unexpected(f"wire type {wire}")
            if stop > end:
                raise _Unexpected("a field runs past its message")
            yield number, wire, position, value_start, stop
            position = stop
