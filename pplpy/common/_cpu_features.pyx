# cython: language_level=3
"""CPU feature probe, built with baseline flags so it is safe to import on any x86-64.

It reads CPUID and, for the AVX families, XCR0 through XGETBV: a CPU may support AVX-512
while the OS does not save its registers, and then using them faults.  This follows the
checks numpy and MLAS make before dispatching.
"""

cdef extern from *:
    """
    #include <cpuid.h>
    #include <stdint.h>
    static uint64_t pplpy_xgetbv0(void) {
        uint32_t eax, edx;
        __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
        return ((uint64_t)edx << 32) | eax;
    }
    static int pplpy_cpuid(unsigned leaf, unsigned sub, unsigned *r) {
        return __get_cpuid_count(leaf, sub, &r[0], &r[1], &r[2], &r[3]);
    }
    """
    unsigned long long pplpy_xgetbv0() nogil
    int pplpy_cpuid(unsigned leaf, unsigned sub, unsigned *r) nogil


def cpu_features():
    """Return the set of ISA feature names this CPU has *and* the OS has enabled."""
    cdef unsigned r1[4]
    cdef unsigned r7[4]
    cdef unsigned long long xcr0 = 0
    found = set()
    if not pplpy_cpuid(1, 0, r1):
        return found
    # leaf 1: ecx bits
    if r1[2] & (1 << 19):
        found.add("sse4_1")
    if r1[2] & (1 << 20):
        found.add("sse4_2")
    osxsave = bool(r1[2] & (1 << 27))
    has_avx = bool(r1[2] & (1 << 28))
    has_fma = bool(r1[2] & (1 << 12))
    if osxsave:
        xcr0 = pplpy_xgetbv0()
    ymm_ok = osxsave and (xcr0 & 0x6) == 0x6          # XMM and YMM state
    zmm_ok = ymm_ok and (xcr0 & 0xE0) == 0xE0          # opmask, ZMM_Hi256, Hi16_ZMM
    if not pplpy_cpuid(7, 0, r7):
        r7[0] = r7[1] = r7[2] = r7[3] = 0
    if ymm_ok and has_avx:
        found.add("avx")
        if has_fma:
            found.add("fma")
        if r7[1] & (1 << 5):
            found.add("avx2")
    if zmm_ok:
        for bit, name in ((16, "avx512f"), (17, "avx512dq"), (30, "avx512bw"), (31, "avx512vl")):
            if r7[1] & (1 << bit):
                found.add(name)
        if r7[2] & (1 << 11):
            found.add("avx512_vnni")
    return found
