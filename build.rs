//! The migrations are embedded in the binary (`refinery::embed_migrations!`),
//! which cargo cannot see: rebuild when the folder changes.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
