//! `gctl certs init|issue`: the cluster's CA and its certificates (needs no controller).

use clap::Subcommand;
use gsched_cli::client::die;
use gsched_cli::outln;
use gsched_proto::tls::PeerIdentity;

#[derive(Subcommand, Debug)]
pub enum Certs {
    /// Make a new cluster CA: DIR/ca.pem (for every host) and DIR/ca.key (keep it safe).
    Init {
        #[arg(long, default_value = "/etc/gsched/tls")]
        dir: std::path::PathBuf,
        /// A name for the cluster, shown in the CA's subject.
        #[arg(long, default_value = "gsched")]
        cluster: String,
    },
    /// Issue a certificate and key for a controller or a node, signed by DIR's CA.
    Issue {
        #[arg(long, default_value = "/etc/gsched/tls")]
        dir: std::path::PathBuf,
        /// A node agent's certificate, for the node NAME (its `gagentd --name`).
        #[arg(
            long,
            conflicts_with = "controller",
            required_unless_present = "controller"
        )]
        node: Option<String>,
        /// A controller's certificate, for controller ID (its `gctld --id`).
        #[arg(long)]
        controller: Option<u64>,
        /// A host name or address the holder is reached by (repeat; controllers).
        #[arg(long = "host")]
        hosts: Vec<String>,
    },
}

/// `gctl certs init|issue` (needs no controller).
pub fn run(action: Certs) {
    let made = match action {
        Certs::Init { dir, cluster } => gsched_cli::certs::init(&dir, &cluster),
        Certs::Issue {
            dir,
            node,
            controller,
            hosts,
        } => {
            let who = match (node, controller) {
                (Some(n), _) => PeerIdentity::Node(n),
                (None, Some(id)) => PeerIdentity::Controller(id),
                (None, None) => die("gctl", "give --node NAME or --controller ID"),
            };
            gsched_cli::certs::issue(&dir, &who, &hosts)
        }
    };
    for path in made.unwrap_or_else(|e| die("gctl", e)) {
        outln!("wrote {path}");
    }
}
