//! A measurement table read into memory, whatever the file format: named columns and rows of
//! cells, with accessors whose errors name the file, the row and the column.
//!
//! Parquet files are read with the `parquet` crate's row API (no Arrow: the tables are a few
//! hundred thousand rows of plain numbers and strings); CSV files with the `csv` crate.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::Field;

use super::ImportError;

/// Rows that one table may hold: far above any published measurement table (the largest in
/// `public-measurements` has 143,000), and a bound on what a malformed file makes us allocate.
pub const ROWS_MAX: usize = 5_000_000;

/// One cell: the types measurement tables use.
#[derive(Clone, Debug, PartialEq)]
pub enum Cell {
    Null,
    Int(i64),
    Float(f64),
    Text(String),
}

/// A table: column names and rows of cells, in file order.
#[derive(Clone, Debug)]
pub struct Table {
    pub file: PathBuf,
    names: Vec<String>,
    index: HashMap<String, usize>,
    rows: Vec<Vec<Cell>>,
}

impl Table {
    fn new(file: &Path, names: Vec<String>, rows: Vec<Vec<Cell>>) -> Table {
        let index = names.iter().enumerate().map(|(i, n)| (n.clone(), i)).collect();
        Table { file: file.to_path_buf(), names, index, rows }
    }

    /// Reads a parquet file. The `parquet` crate panics on some corrupt files (a flipped byte in
    /// a footer or a data page): each panic is contained and reported as an error naming the
    /// file, and the row and column it was reading where they can be told.
    pub fn read_parquet(file: &Path) -> Result<Table, ImportError> {
        let bad = |message: String| ImportError::File { file: file.to_path_buf(), message };
        let handle = std::fs::File::open(file).map_err(|e| bad(format!("cannot read: {e}")))?;
        let reader = crate::panic_guard::contain(|| SerializedFileReader::new(handle))
            .map_err(|panic| bad(format!("not a readable parquet file: its footer made the parquet library fail ({panic})")))?
            .map_err(|e| bad(format!("not a readable parquet file: {e}")))?;
        let total = reader.metadata().file_metadata().num_rows();
        if total < 0 || total as u64 > ROWS_MAX as u64 {
            return Err(bad(format!("{total} rows; at most {ROWS_MAX} are read")));
        }
        let names: Vec<String> =
            reader.metadata().file_metadata().schema_descr().columns().iter().map(|c| c.name().to_string()).collect();
        let rows = match crate::panic_guard::contain(|| read_rows(&reader, None, &names, total as usize, file)) {
            Ok(rows) => rows?,
            Err(panic) => return Err(locate_panic(&reader, file, panic)),
        };
        Ok(Table::new(file, names, rows))
    }

    /// Reads a CSV file with a header line.
    pub fn read_csv(file: &Path) -> Result<Table, ImportError> {
        let bad = |message: String| ImportError::File { file: file.to_path_buf(), message };
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(true)
            .flexible(false)
            .from_path(file)
            .map_err(|e| bad(format!("cannot read: {e}")))?;
        let names: Vec<String> =
            reader.headers().map_err(|e| bad(format!("cannot read the header: {e}")))?.iter().map(|s| s.trim().to_string()).collect();
        let mut rows = Vec::new();
        for (i, record) in reader.records().enumerate() {
            let record = record.map_err(|e| ImportError::Row { file: file.to_path_buf(), row: i + 1, message: e.to_string() })?;
            if rows.len() >= ROWS_MAX {
                return Err(bad(format!("more than {ROWS_MAX} rows")));
            }
            rows.push(
                record
                    .iter()
                    .map(|text| {
                        let text = text.trim();
                        if text.is_empty() {
                            Cell::Null
                        } else if let Ok(v) = text.parse::<i64>() {
                            Cell::Int(v)
                        } else if let Ok(v) = text.parse::<f64>() {
                            Cell::Float(v)
                        } else {
                            Cell::Text(text.to_string())
                        }
                    })
                    .collect(),
            );
        }
        Ok(Table::new(file, names, rows))
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn column_names(&self) -> &[String] {
        &self.names
    }

    pub fn has_column(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// The index of each named column; an error naming the first one missing.
    pub fn columns<const N: usize>(&self, names: [&str; N]) -> Result<[usize; N], ImportError> {
        let mut out = [0; N];
        for (slot, name) in out.iter_mut().zip(names) {
            *slot = *self.index.get(name).ok_or_else(|| ImportError::File {
                file: self.file.clone(),
                message: format!("no column `{name}` (columns: {})", self.names.join(", ")),
            })?;
        }
        Ok(out)
    }

    /// The rows, each with its accessors.
    pub fn rows(&self) -> impl Iterator<Item = RowRef<'_>> {
        self.rows.iter().enumerate().map(move |(i, cells)| RowRef { table: self, number: i + 1, cells })
    }
}

/// One row of a [`Table`]: typed cells whose errors name the file, the row and the column.
#[derive(Clone, Copy, Debug)]
pub struct RowRef<'a> {
    table: &'a Table,
    /// 1-based, not counting a header.
    pub number: usize,
    cells: &'a [Cell],
}

impl RowRef<'_> {
    fn error(&self, col: usize, expected: &str) -> ImportError {
        ImportError::Cell {
            file: self.table.file.clone(),
            row: self.number,
            column: self.table.names[col].clone(),
            message: format!("expected {expected}, found {:?}", self.cells[col]),
        }
    }

    /// An error naming this row's `col`, its value and `message` (what is wrong with it).
    pub fn invalid(&self, col: usize, message: &str) -> ImportError {
        ImportError::Cell {
            file: self.table.file.clone(),
            row: self.number,
            column: self.table.names[col].clone(),
            message: format!("{:?}: {message}", self.cells[col]),
        }
    }

    /// A text cell.
    pub fn text(&self, col: usize) -> Result<&str, ImportError> {
        match &self.cells[col] {
            Cell::Text(s) => Ok(s),
            _ => Err(self.error(col, "text")),
        }
    }

    /// A true/false cell (`True`, `False`, as pandas writes them; `true`, `false`, `1`, `0`).
    pub fn flag(&self, col: usize) -> Result<bool, ImportError> {
        match &self.cells[col] {
            Cell::Text(s) if s.eq_ignore_ascii_case("true") => Ok(true),
            Cell::Text(s) if s.eq_ignore_ascii_case("false") => Ok(false),
            Cell::Int(v @ (0 | 1)) => Ok(*v == 1),
            _ => Err(self.error(col, "True or False")),
        }
    }

    /// A number ≥ 0, finite (a time too short to register is 0).
    pub fn nonnegative(&self, col: usize) -> Result<f64, ImportError> {
        let v = match self.cells[col] {
            Cell::Int(v) => v as f64,
            Cell::Float(v) => v,
            _ => return Err(self.error(col, "a number ≥ 0")),
        };
        if v.is_finite() && v >= 0.0 { Ok(v) } else { Err(self.error(col, "a finite number ≥ 0")) }
    }

    /// Whether the cell is empty.
    pub fn is_null(&self, col: usize) -> bool {
        self.cells[col] == Cell::Null
    }

    /// A whole number in `1..=max`.
    pub fn count(&self, col: usize, max: u64) -> Result<u64, ImportError> {
        match self.cells[col] {
            Cell::Int(v) if v >= 1 && v as u64 <= max => Ok(v as u64),
            Cell::Float(v) if v.fract() == 0.0 && v >= 1.0 && v <= max as f64 => Ok(v as u64),
            _ => Err(self.error(col, &format!("a whole number in 1..={max}"))),
        }
    }

    /// A whole number ≥ 0 (at most `max`).
    pub fn whole(&self, col: usize, max: u64) -> Result<u64, ImportError> {
        match self.cells[col] {
            Cell::Int(v) if v >= 0 && v as u64 <= max => Ok(v as u64),
            Cell::Float(v) if v.fract() == 0.0 && v >= 0.0 && v <= max as f64 => Ok(v as u64),
            _ => Err(self.error(col, &format!("a whole number in 0..={max}"))),
        }
    }

    /// A positive, finite duration or size.
    pub fn positive(&self, col: usize) -> Result<f64, ImportError> {
        let v = match self.cells[col] {
            Cell::Int(v) => v as f64,
            Cell::Float(v) => v,
            _ => return Err(self.error(col, "a positive number")),
        };
        if v.is_finite() && v > 0.0 { Ok(v) } else { Err(self.error(col, "a positive, finite number")) }
    }
}

/// Reads the rows of `reader`, every column or only `projection`'s, into cells in `names` order.
fn read_rows(
    reader: &SerializedFileReader<std::fs::File>,
    projection: Option<parquet::schema::types::Type>,
    names: &[String],
    total: usize,
    file: &Path,
) -> Result<Vec<Vec<Cell>>, ImportError> {
    let bad = |message: String| ImportError::File { file: file.to_path_buf(), message };
    let mut rows = Vec::with_capacity(total);
    let iter = reader.get_row_iter(projection).map_err(|e| bad(format!("cannot read rows: {e}")))?;
    for (i, row) in iter.enumerate() {
        let row = row.map_err(|e| ImportError::Row { file: file.to_path_buf(), row: i + 1, message: e.to_string() })?;
        let mut cells = vec![Cell::Null; names.len()];
        for (name, field) in row.get_column_iter() {
            if let Some(at) = names.iter().position(|n| n == name) {
                cells[at] = cell(field);
            }
        }
        rows.push(cells);
    }
    Ok(rows)
}

fn cell(field: &Field) -> Cell {
    match field {
        Field::Null => Cell::Null,
        Field::Bool(b) => Cell::Int(i64::from(*b)),
        Field::Byte(v) => Cell::Int(i64::from(*v)),
        Field::Short(v) => Cell::Int(i64::from(*v)),
        Field::Int(v) => Cell::Int(i64::from(*v)),
        Field::Long(v) => Cell::Int(*v),
        Field::UByte(v) => Cell::Int(i64::from(*v)),
        Field::UShort(v) => Cell::Int(i64::from(*v)),
        Field::UInt(v) => Cell::Int(i64::from(*v)),
        Field::ULong(v) => Cell::Int(i64::try_from(*v).unwrap_or(i64::MAX)),
        Field::Float(v) => Cell::Float(f64::from(*v)),
        Field::Double(v) => Cell::Float(*v),
        Field::Str(s) => Cell::Text(s.clone()),
        other => Cell::Text(other.to_string()),
    }
}

/// After a panic reading whole rows: reads each column alone to name the one whose pages make
/// the library fail (a corrupt page belongs to one column), and the row it got to.
fn locate_panic(reader: &SerializedFileReader<std::fs::File>, file: &Path, panic: String) -> ImportError {
    let fields = reader.metadata().file_metadata().schema_descr().root_schema().get_fields().to_vec();
    for field in fields {
        let column = field.name().to_string();
        let Ok(projection) = parquet::schema::types::Type::group_type_builder("schema").with_fields(vec![field]).build() else { continue };
        let mut rows_read = 0;
        let outcome = crate::panic_guard::contain(|| {
            let Ok(iter) = reader.get_row_iter(Some(projection)) else { return };
            for row in iter {
                if row.is_err() {
                    return;
                }
                rows_read += 1;
            }
        });
        if let Err(panic) = outcome {
            return ImportError::Cell {
                file: file.to_path_buf(),
                row: rows_read + 1,
                column,
                message: format!("corrupt data: the parquet library failed reading it ({panic})"),
            };
        }
    }
    ImportError::File { file: file.to_path_buf(), message: format!("corrupt data: the parquet library failed reading its rows ({panic})") }
}
