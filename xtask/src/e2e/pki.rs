//! The node's certificates and kubeconfigs, made with openssl as kubeadm lays them out:
//! one CA, the API server's serving certificate, a client certificate and kubeconfig per
//! component (each with the identity RBAC and the Node authorizer expect), and the
//! service-account signing key.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use crate::proc::output;

/// Subject and role of each client identity.
pub struct Client {
    /// File stem and kubeconfig name.
    pub name: String,
    common_name: String,
    organization: Option<&'static str>,
}

pub struct Pki {
    pub dir: PathBuf,
}

impl Pki {
    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    pub fn cert(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.crt"))
    }

    pub fn key(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.key"))
    }

    pub fn kubeconfig(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.kubeconfig"))
    }

    /// The kubeconfig of the kubelet of `node`: its own client certificate, which the Node
    /// authorizer ties to that node alone.
    pub fn kubelet_kubeconfig(&self, node: &str) -> PathBuf {
        self.kubeconfig(&kubelet_identity(node))
    }
}

/// The file stem of a kubelet's certificate and kubeconfig.
fn kubelet_identity(node: &str) -> String {
    format!("kubelet-{node}")
}

/// The control plane's identities, and one kubelet identity per node (`system:node:<name>`
/// in `system:nodes`, as the Node authorizer expects).
pub fn clients(node_names: &[&str]) -> Vec<Client> {
    let client =
        |name: &str, cn: &str, organization| Client { name: name.to_owned(), common_name: cn.to_owned(), organization };
    let mut all = vec![
        client("admin", "kubernetes-admin", Some("system:masters")),
        client("kube-controller-manager", "system:kube-controller-manager", None),
        client("kube-scheduler", "system:kube-scheduler", None),
        // The API server's identity towards kubelets (exec, logs).
        client("apiserver-kubelet-client", "kube-apiserver-kubelet-client", Some("system:masters")),
    ];
    for node in node_names {
        all.push(client(&kubelet_identity(node), &format!("system:node:{node}"), Some("system:nodes")));
    }
    all
}

fn openssl(args: &[&str]) -> anyhow::Result<()> {
    output(Command::new("openssl").args(args))?;
    Ok(())
}

fn path(p: &Path) -> &str {
    p.to_str().expect("the node's paths are UTF-8")
}

/// Writes every certificate, key and kubeconfig into `dir` (a kubelet's for each of
/// `node_names`); `server_names` are the API server's subject alternative names, `api_url`
/// the address the kubeconfigs name.
pub fn create(dir: &Path, node_names: &[&str], server_names: &[&str], api_url: &str) -> anyhow::Result<Pki> {
    fs::create_dir_all(dir)?;
    let pki = Pki { dir: dir.to_owned() };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "7"];
    let (ca, ca_key) = (pki.ca(), pki.key("ca"));
    let mut args = vec!["req", "-x509", "-subj", "/CN=volguard-e2e-ca", "-keyout", path(&ca_key), "-out", path(&ca)];
    args.extend(ec);
    openssl(&args)?;

    // A CSR, then the CA's signature with exactly the extensions given: `req -x509 -CA`
    // would copy the config's v3_ca (CA:TRUE) into every leaf, which rustls (the
    // agent's client) rightly refuses as a CA used as an end entity.
    let signed = |name: &str, subject: &str, extensions: &[String]| -> anyhow::Result<()> {
        let (cert, key, csr, ext) =
            (pki.cert(name), pki.key(name), dir.join(format!("{name}.csr")), dir.join(format!("{name}.ext")));
        let mut args = vec!["req", "-new", "-subj", subject, "-keyout", path(&key), "-out", path(&csr)];
        args.extend(&ec[..5]);
        openssl(&args)?;
        let mut lines = vec![
            "basicConstraints = critical, CA:FALSE".to_owned(),
            "keyUsage = critical, digitalSignature".to_owned(),
        ];
        lines.extend(extensions.iter().cloned());
        fs::write(&ext, lines.join("\n") + "\n")?;
        openssl(&[
            "x509",
            "-req",
            "-in",
            path(&csr),
            "-CA",
            path(&ca),
            "-CAkey",
            path(&ca_key),
            "-CAcreateserial",
            "-days",
            "7",
            "-extfile",
            path(&ext),
            "-out",
            path(&cert),
        ])?;
        fs::remove_file(csr)?;
        fs::remove_file(ext)?;
        Ok(())
    };
    let sans: Vec<String> = server_names
        .iter()
        .map(|n| if n.parse::<std::net::IpAddr>().is_ok() { format!("IP:{n}") } else { format!("DNS:{n}") })
        .collect();
    signed(
        "apiserver",
        "/CN=kube-apiserver",
        &[format!("subjectAltName = {}", sans.join(",")), "extendedKeyUsage = serverAuth".to_owned()],
    )?;
    for client in clients(node_names) {
        let subject = match client.organization {
            Some(o) => format!("/O={o}/CN={}", client.common_name),
            None => format!("/CN={}", client.common_name),
        };
        signed(&client.name, &subject, &["extendedKeyUsage = clientAuth".to_owned()])?;
        fs::write(pki.kubeconfig(&client.name), kubeconfig(&pki, &client.name, api_url))?;
    }
    // The service-account token signing key pair.
    openssl(&[
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-out",
        path(&pki.key("sa")),
    ])?;
    openssl(&["pkey", "-in", path(&pki.key("sa")), "-pubout", "-out", path(&dir.join("sa.pub"))])?;
    Ok(pki)
}

fn kubeconfig(pki: &Pki, name: &str, api_url: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: e2e\n  cluster:\n    server: {api_url}\n    \
         certificate-authority: {ca}\nusers:\n- name: {name}\n  user:\n    client-certificate: {cert}\n    \
         client-key: {key}\ncontexts:\n- name: {name}\n  context:\n    cluster: e2e\n    user: {name}\n\
         current-context: {name}\n",
        ca = pki.ca().display(),
        cert = pki.cert(name).display(),
        key = pki.key(name).display(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_node_gets_a_kubelet_identity_of_its_own_that_the_node_authorizer_accepts() {
        let clients = clients(&["volguard-e2e", "volguard-e2e-vm"]);
        let kubelets: Vec<(&str, &str, Option<&str>)> = clients
            .iter()
            .filter(|c| c.name.starts_with("kubelet"))
            .map(|c| (c.name.as_str(), c.common_name.as_str(), c.organization))
            .collect();
        assert_eq!(
            kubelets,
            [
                ("kubelet-volguard-e2e", "system:node:volguard-e2e", Some("system:nodes")),
                ("kubelet-volguard-e2e-vm", "system:node:volguard-e2e-vm", Some("system:nodes")),
            ]
        );
        let pki = Pki { dir: PathBuf::from("/pki") };
        assert_eq!(pki.kubelet_kubeconfig("volguard-e2e-vm"), Path::new("/pki/kubelet-volguard-e2e-vm.kubeconfig"));
        let names: std::collections::BTreeSet<&str> = clients.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names.len(), clients.len(), "one file stem per identity");
    }
}
