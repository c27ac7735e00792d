//! One module per probe family: how it is attached, and how its kernel maps are
//! drained into the profile. `shared` drains what every family uses (stacks, losses,
//! thread names).

pub mod cpu;
pub mod func;
pub mod hold;
pub mod io;
pub mod lock;
pub mod offcpu;
pub mod rpc;
pub mod shared;
