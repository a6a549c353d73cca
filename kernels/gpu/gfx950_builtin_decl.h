// Syntax check only (the hip_gfx950_branch_syntax test; never in a real
// build): Debian's hipcc (clang 15) does not know gfx950, so this declares
// the builtin that a16wfp4_mfma_scale's gfx950 branch calls, with the
// signature newer clang gives it (v4f32 (v8i32 a, v8i32 b, v4f32 c,
// const int cbsz, const int blgp, const int opsel_a, int scale_a,
// const int opsel_b, int scale_b)), so that the branch is at least
// type-checked here with -D__gfx950__. It proves nothing about the
// instruction itself.
typedef float mxval_decl_floatx4 __attribute__((ext_vector_type(4)));
typedef int mxval_decl_intx8 __attribute__((ext_vector_type(8)));
__attribute__((device)) mxval_decl_floatx4 __builtin_amdgcn_mfma_scale_f32_16x16x128_f8f6f4(
    mxval_decl_intx8, mxval_decl_intx8, mxval_decl_floatx4, int, int, int, int, int, int);
