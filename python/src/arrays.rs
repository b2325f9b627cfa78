//! NumPy arrays in and out: keys as `uint64` or `int64`, values as `float32`.
//!
//! Values cross without a copy: a pull writes into the caller's array (or a new one handed
//! over without a copy), a push reads the caller's array in place. Keys are copied into the
//! worker's scratch vector on the way, since parma's `Key` is its own type (and `int64` keys
//! need a check for negatives anyway): 8 bytes per key beside a value of `4 × len` bytes.

use numpy::{PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use parma::{Key, Layout};
use pyo3::exceptions::PyIndexError;
use pyo3::prelude::*;
use pyo3::types::PyAny;

use crate::errors::{type_error, value_error};

/// Fills `out` with the keys of `obj`: a NumPy array of `uint64` or `int64` (any shape,
/// C-contiguous), or anything `numpy.asarray` turns into integers (a list, a range).
pub fn keys_into(obj: &Bound<'_, PyAny>, what: &str, out: &mut Vec<Key>) -> PyResult<()> {
    out.clear();
    let owned;
    let arr = match obj.cast::<PyUntypedArray>() {
        Ok(a) => a.clone(),
        Err(_) => {
            if obj.hasattr("__dlpack__")? && !obj.hasattr("__array_interface__")? {
                return Err(type_error(format!(
                    "{what} must be a NumPy array of uint64 or int64 (for a torch tensor: .numpy())"
                )));
            }
            let np = obj.py().import("numpy")?;
            owned = np.call_method1("asarray", (obj,)).map_err(|_| {
                type_error(format!("{what} must be a NumPy array of uint64 or int64, or a sequence of ints"))
            })?;
            if owned.getattr("size")?.extract::<usize>()? == 0 {
                return Ok(());
            }
            owned.cast::<PyUntypedArray>().map_err(|e| type_error(e.to_string()))?.clone()
        }
    };
    let dtype = arr.dtype();
    let py = obj.py();
    if dtype.is_equiv_to(&numpy::dtype::<u64>(py)) {
        let a = arr.cast::<PyArrayDyn<u64>>().map_err(|e| type_error(e.to_string()))?;
        let ro = a.try_readonly().map_err(|e| value_error(format!("{what}: {e}")))?;
        let s = ro.as_slice().map_err(|_| not_contiguous(what))?;
        out.extend(s.iter().map(|&k| Key(k)));
    } else if dtype.is_equiv_to(&numpy::dtype::<i64>(py)) {
        let a = arr.cast::<PyArrayDyn<i64>>().map_err(|e| type_error(e.to_string()))?;
        let ro = a.try_readonly().map_err(|e| value_error(format!("{what}: {e}")))?;
        let s = ro.as_slice().map_err(|_| not_contiguous(what))?;
        out.reserve(s.len());
        for &k in s {
            let k = u64::try_from(k)
                .map_err(|_| PyIndexError::new_err(format!("the key {k} is negative: keys are 0 or more")))?;
            out.push(Key(k));
        }
    } else {
        return Err(type_error(format!("{what} must have dtype uint64 or int64, not {}", dtype_name(&arr))));
    }
    Ok(())
}

fn dtype_name(arr: &Bound<'_, PyUntypedArray>) -> String {
    arr.dtype().str().map(|s| s.to_string()).unwrap_or_else(|_| "an unknown dtype".into())
}

fn not_contiguous(what: &str) -> PyErr {
    value_error(format!("{what} must be C-contiguous (numpy.ascontiguousarray makes it so)"))
}

/// `obj` as a float32 array (any shape, C-contiguous), or a `TypeError` that says why not.
pub fn f32_array<'py>(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
    let arr = obj.cast::<PyUntypedArray>().map_err(|_| {
        if obj.hasattr("__dlpack__").unwrap_or(false) {
            type_error(format!("{what} must be a NumPy float32 array (for a torch tensor: .numpy())"))
        } else {
            type_error(format!("{what} must be a NumPy float32 array"))
        }
    })?;
    if !arr.dtype().is_equiv_to(&numpy::dtype::<f32>(obj.py())) {
        return Err(type_error(format!("{what} must have dtype float32, not {}", dtype_name(arr))));
    }
    if !arr.is_c_contiguous() {
        return Err(not_contiguous(what));
    }
    Ok(arr.cast::<PyArrayDyn<f32>>().map_err(|e| type_error(e.to_string()))?.clone())
}

/// The total value length of `keys` and, if every key has the same length, that length.
/// `IndexError` for a key outside the layout.
pub fn lengths(layout: &Layout, keys: &[Key]) -> PyResult<(usize, Option<usize>)> {
    if let Some(l) = layout.uniform_len() {
        for &k in keys {
            if !layout.contains(k) {
                return Err(outside(layout, k));
            }
        }
        return Ok((l * keys.len(), Some(l)));
    }
    let mut total = 0usize;
    let mut same = None;
    let mut uniform = true;
    for &k in keys {
        let l = layout.len_of(k).ok_or_else(|| outside(layout, k))?;
        total += l;
        match same {
            None => same = Some(l),
            Some(s) if s != l => uniform = false,
            _ => {}
        }
    }
    Ok((total, if uniform { same.or(Some(0)) } else { None }))
}

fn outside(layout: &Layout, k: Key) -> PyErr {
    PyIndexError::new_err(format!(
        "{} (keys 0..{})",
        parma::OpError::KeyOutsideLayout { key: k },
        layout.key_end()
    ))
}

/// Checks that `arr` holds `total` floats.
pub fn check_len(arr: &Bound<'_, PyArrayDyn<f32>>, total: usize, what: &str) -> PyResult<()> {
    let got = arr.len();
    if got != total {
        return Err(value_error(format!("{what} holds {got} floats; these keys need {total}")));
    }
    Ok(())
}
