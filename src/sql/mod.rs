//! SQL: cheap classification, parsing, planning and splicing of ids into statement text. Pure: no I/O.
