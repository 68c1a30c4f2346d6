# Rounding and saturation of the quantized ops, shared by _quantize (QuantizeLinear,
# DynamicQuantizeLinear) and _quant_int (QLinearMatMul, QLinearConv).  Included, not
# cimported: each module compiles its own inline copy.
#
# ONNX rounds to nearest, ties to even (numpy.rint), then adds the zero point and saturates
# to the integer type's range.  The rounding is the magic-number trick: adding and
# subtracting 1.5 * 2**(mantissa bits) leaves a value rounded by the FPU's default mode (to
# nearest even), which keeps a loop plain arithmetic that gcc vectorises.  It holds only
# for |v| below 2**(mantissa bits - 1), so v is first clamped far outside every integer
# range (inf and huge values saturate correctly; NaN compares false and ends at the low
# bound).  Rounding before or after the zero point is the same: the zero point is an integer.


cdef inline float quantize_f32(float v, float z, float lo, float hi) noexcept nogil:
    """saturate(round_half_even(v) + z) into [lo, hi], in float32 (QuantizeLinear: v is
    x / scale in float32, as the reference computes it)."""
    cdef float magic = 12582912.0  # 1.5 * 2**23
    cdef float lo2 = -2097152.0, hi2 = 2097152.0  # +-2**21: past every range + zero point
    v = v if v > lo2 else lo2
    v = v if v < hi2 else hi2
    v = (v + magic) - magic
    v = v + z
    v = v if v > lo else lo
    return v if v < hi else hi


cdef inline double quantize_f64(double v, double z, double lo, double hi) noexcept nogil:
    """quantize_f32 in float64: the requantization of an int32 accumulator, which the
    reference multiplies by its float32 scale in float64 (numpy's int32 * float32)."""
    cdef double magic = 6755399441055744.0  # 1.5 * 2**52
    cdef double lo2 = -1099511627776.0, hi2 = 1099511627776.0  # +-2**40
    v = v if v > lo2 else lo2
    v = v if v < hi2 else hi2
    v = (v + magic) - magic
    v = v + z
    v = v if v > lo else lo
    return v if v < hi else hi
