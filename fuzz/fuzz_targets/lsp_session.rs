#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| moonkale_fuzz::lsp_session(data));
