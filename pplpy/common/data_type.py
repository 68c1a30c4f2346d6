"""Element types pplpy tensors can hold, with their numpy and ONNX equivalents."""

import enum

import numpy as np
from onnx import TensorProto


class DataType(enum.Enum):
    """A tensor element type.  ``value`` is the ONNX TensorProto enum number."""

    FLOAT32 = TensorProto.FLOAT
    FLOAT16 = TensorProto.FLOAT16
    FLOAT64 = TensorProto.DOUBLE
    INT8 = TensorProto.INT8
    UINT8 = TensorProto.UINT8
    INT16 = TensorProto.INT16
    UINT16 = TensorProto.UINT16
    INT32 = TensorProto.INT32
    UINT32 = TensorProto.UINT32
    INT64 = TensorProto.INT64
    UINT64 = TensorProto.UINT64
    BOOL = TensorProto.BOOL

    @property
    def numpy(self):
        """The numpy dtype of this element type."""
        return _TO_NUMPY[self]

    @property
    def itemsize(self):
        return _TO_NUMPY[self].itemsize

    @classmethod
    def from_onnx(cls, elem_type):
        """DataType for an ONNX TensorProto element type; None if pplpy has no such type."""
        try:
            return cls(elem_type)
        except ValueError:
            return None

    @classmethod
    def from_numpy(cls, dtype):
        """DataType for a numpy dtype; None if pplpy has no such type."""
        return _FROM_NUMPY.get(np.dtype(dtype))

    def __str__(self):
        return self.name.lower()


_TO_NUMPY = {
    DataType.FLOAT32: np.dtype(np.float32),
    DataType.FLOAT16: np.dtype(np.float16),
    DataType.FLOAT64: np.dtype(np.float64),
    DataType.INT8: np.dtype(np.int8),
    DataType.UINT8: np.dtype(np.uint8),
    DataType.INT16: np.dtype(np.int16),
    DataType.UINT16: np.dtype(np.uint16),
    DataType.INT32: np.dtype(np.int32),
    DataType.UINT32: np.dtype(np.uint32),
    DataType.INT64: np.dtype(np.int64),
    DataType.UINT64: np.dtype(np.uint64),
    DataType.BOOL: np.dtype(np.bool_),
}
_FROM_NUMPY = {v: k for k, v in _TO_NUMPY.items()}
