//! Temporary: tells the integration tests whether the emulator's `TestServer` exists yet in
//! this checkout (it lands on `main` with the emulator's server). Removed once it is merged.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(mongolock_emulator)");
    println!("cargo::rerun-if-changed=../mongolock-testkit/src/server.rs");
    if std::path::Path::new("../mongolock-testkit/src/server.rs").exists() {
        println!("cargo::rustc-cfg=mongolock_emulator");
    }
}
