#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| moonkale_fuzz::mcp_calls(data));
