//! End to end: `moonkale-service acp`, the Agent Client Protocol front
//! door, driven the way an editor's agent panel drives it: the real
//! service runs the real `claude` CLI against the fake Anthropic API, and
//! an ACP client (`moonkale_tests::acp::AcpAgent`, or a real one from the
//! package registries) starts `moonkale-service acp` as its agent.
//!
//! One test binary, one module per concern; this file holds the helpers
//! they share.

mod flows;
mod hostile;
mod peers;
mod remote;

use std::path::PathBuf;

use moonkale_tests::acp::AcpAgent;
use moonkale_tests::agent::write_script;
use moonkale_tests::world::World;

/// Scripts the model to answer `prompt` by writing `text` to `rel` (in the
/// workspace), then saying `done`; the file's path.
fn model_writes(w: &World, prompt: &str, rel: &str, text: &str, done: &str) -> PathBuf {
    let path = w.path(rel);
    w.fake.set_script(write_script(prompt, &path, text, done));
    path
}

/// `moonkale-service acp --workspace <the world's workspace>`, started as
/// an ACP client starts its agent, and initialized.
async fn acp_agent(w: &World, name: &str) -> AcpAgent {
    let mut cmd = w.command(&["acp", "--workspace"]);
    cmd.arg(&w.sb.workspace);
    let mut agent = AcpAgent::spawn(cmd, &w.sb.root.join(format!("acp-{name}.log")));
    agent.initialize().await;
    agent
}
