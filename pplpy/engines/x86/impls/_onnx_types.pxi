# ONNX TensorProto element-type numbers, for the dtype-agnostic modules (_cast, _index,
# _logic) that switch on a tensor's type inside a step.  Included, not cimported: each
# module compiles its own copy.

cdef enum:
    T_FLOAT = 1
    T_UINT8 = 2
    T_INT8 = 3
    T_UINT16 = 4
    T_INT16 = 5
    T_INT32 = 6
    T_INT64 = 7
    T_BOOL = 9
    T_FLOAT16 = 10
    T_DOUBLE = 11
    T_UINT32 = 12
    T_UINT64 = 13
