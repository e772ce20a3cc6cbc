//! Sets the linker flags a Node addon needs on each platform (napi-build).

fn main() {
    napi_build::setup();
}
