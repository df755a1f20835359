//! The id allocator (sequence and snowflake generators over a persistent store).
