//! Routing analysis of SELECT/UPDATE/DELETE/DDL. (Being written.)
