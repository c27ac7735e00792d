//! What works on several profiles: compare two (`diff`), merge many (`merge`), find
//! the outliers among many (`outliers`), aggregate a fleet's (`fleet`).

pub mod diff;
pub mod fleet;
pub mod merge;
pub mod outliers;
