//! The add kernels of the store: a worker's update added into a value (and, for a replica,
//! into its unsent delta) with the common widths unrolled; and the prefetches of a key's
//! lines. (Copies need no kernel: a run's body is compiled for each short width, where
//! `copy_from_slice` is a few moves, and a call of `memcpy` pays for itself on long values.)

/// Asks the CPU to bring the cache line at `addr` into its caches. A prefetch is a hint: it
/// never faults, whatever the address (a stale or wild one only wastes the fetch), and
/// changes no memory, so no caller can misuse it. A no-op where the target has no prefetch
/// instruction in stable Rust.
#[inline(always)]
pub(super) fn prefetch_line(addr: usize) {
    // Left out under Miri, as `prefetch_line_for_write` is: it changes nothing Miri could check.
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: PREFETCHT0 (SSE, part of the x86-64 baseline) does not access memory
    // architecturally: it cannot fault or change any value, for any address.
    #[allow(unsafe_code)]
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(addr as *const i8);
    }
    #[cfg(any(not(target_arch = "x86_64"), miri))]
    let _ = addr;
}

/// [`prefetch_line`] for a line the caller will write (PREFETCHW): the line arrives ready to
/// be written, so a latch taken on it later does not wait for another core to give it up.
#[inline(always)]
pub(super) fn prefetch_line_for_write(addr: usize) {
    // Miri cannot run inline assembly; a prefetch changes nothing it could check.
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: PREFETCHW does not access memory architecturally (it cannot fault or change a
    // value, for any address); x86-64 CPUs without it run it as a no-op.
    #[allow(unsafe_code)]
    unsafe {
        core::arch::asm!("prefetchw [{0}]", in(reg) addr, options(nostack, preserves_flags, readonly));
    }
    #[cfg(any(not(target_arch = "x86_64"), miri))]
    let _ = addr;
}

/// `dst[i] += src[i]` over equal lengths known only at run time. The usual widths (powers of
/// two up to 128: short values such as a linear model's, and embeddings) get a kernel with the
/// width as a constant, which the compiler unrolls into straight adds, as it would for a model
/// compiled for one width; other widths go through fixed-width chunks. The `match` costs one
/// well-predicted branch per value.
#[inline(always)]
pub(super) fn add_into(dst: &mut [f32], src: &[f32]) {
    debug_assert_eq!(dst.len(), src.len());
    match dst.len() {
        1 => add_fixed::<1>(dst, src),
        2 => add_fixed::<2>(dst, src),
        4 => add_fixed::<4>(dst, src),
        8 => add_fixed::<8>(dst, src),
        16 => add_fixed::<16>(dst, src),
        32 => add_fixed::<32>(dst, src),
        64 => add_fixed::<64>(dst, src),
        128 => add_fixed::<128>(dst, src),
        _ => add_chunked(dst, src),
    }
}

#[inline(always)]
fn add_fixed<const N: usize>(dst: &mut [f32], src: &[f32]) {
    if let (Ok(d), Ok(s)) = (<&mut [f32; N]>::try_from(dst), <&[f32; N]>::try_from(src)) {
        for i in 0..N {
            d[i] += s[i];
        }
    }
}

/// `value[i] += src[i]` and `unsent[i] += src[i]` over equal lengths: a worker's update of a
/// replica, which goes into its copy and into the delta not yet sent to the owner. One pass
/// with the same kernels as [`add_into`]; two calls of it read `src` twice and pay the width
/// dispatch and the length checks twice (28 instructions more per 64-float key in
/// `Worker::push`, callgrind, 2026-11-25).
#[inline(always)]
pub(super) fn add_into_both(value: &mut [f32], unsent: &mut [f32], src: &[f32]) {
    debug_assert!(value.len() == src.len() && unsent.len() == src.len());
    match src.len() {
        1 => add_both_fixed::<1>(value, unsent, src),
        2 => add_both_fixed::<2>(value, unsent, src),
        4 => add_both_fixed::<4>(value, unsent, src),
        8 => add_both_fixed::<8>(value, unsent, src),
        16 => add_both_fixed::<16>(value, unsent, src),
        32 => add_both_fixed::<32>(value, unsent, src),
        64 => add_both_fixed::<64>(value, unsent, src),
        128 => add_both_fixed::<128>(value, unsent, src),
        _ => {
            add_chunked(value, src);
            add_chunked(unsent, src);
        }
    }
}

#[inline(always)]
fn add_both_fixed<const N: usize>(value: &mut [f32], unsent: &mut [f32], src: &[f32]) {
    if let (Ok(v), Ok(u), Ok(s)) =
        (<&mut [f32; N]>::try_from(value), <&mut [f32; N]>::try_from(unsent), <&[f32; N]>::try_from(src))
    {
        for i in 0..N {
            v[i] += s[i];
            u[i] += s[i];
        }
    }
}

#[inline(always)]
fn add_chunked(dst: &mut [f32], src: &[f32]) {
    const W: usize = 16;
    let mut d = dst.chunks_exact_mut(W);
    let mut s = src.chunks_exact(W);
    for (a, b) in (&mut d).zip(&mut s) {
        for i in 0..W {
            a[i] += b[i];
        }
    }
    for (a, b) in d.into_remainder().iter_mut().zip(s.remainder()) {
        *a += *b;
    }
}
