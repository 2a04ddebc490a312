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

use moonkale_tests::acp::AcpAgent;
use moonkale_tests::world::World;

/// `moonkale-service acp --workspace <the world's workspace>`, started as
/// an ACP client starts its agent, and initialized.
async fn acp_agent(w: &World, name: &str) -> AcpAgent {
    let mut cmd = w.command(&["acp", "--workspace"]);
    cmd.arg(&w.sb.workspace);
    let mut agent = AcpAgent::spawn(cmd, &w.sb.root.join(format!("acp-{name}.log")));
    agent.initialize().await;
    agent
}
