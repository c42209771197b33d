//! What a node's preflight records for the fleet view (`mcsup preflight --aggregate`): one typed
//! struct, written by the checks, compared by the aggregate, and carried in `--json` as the flat
//! `"facts"` map tools already read (`{"rdma.gid_index": "mlx5_0=3,mlx5_1=3", "rdma.path_mtu":
//! "4096", ...}`: every value a string, lists comma-joined, absent facts left out).

use serde::{Deserialize, Serialize};

/// The facts of one node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Facts {
    /// Every RDMA device present on the node.
    #[serde(rename = "rdma.devices_present", default, with = "list")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub devices_present: Option<Vec<String>>,
    /// The devices Mooncake will use.
    #[serde(rename = "rdma.devices", default, with = "list")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub devices: Option<Vec<String>>,
    /// The GID index Mooncake will use on each of those devices.
    #[serde(rename = "rdma.gid_index", default, with = "gid_list")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gid_index: Option<Vec<(String, u32)>>,
    /// The active MTU shared by the devices (bytes).
    #[serde(rename = "rdma.active_mtu", default, with = "number")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_mtu: Option<u32>,
    /// The path MTU Mooncake's endpoints use: min(active, `MC_MTU`, 4096).
    #[serde(rename = "rdma.path_mtu", default, with = "number")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path_mtu: Option<u32>,
    /// RLIMIT_MEMLOCK: `unlimited`, a size, or `unknown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memlock: Option<String>,
    /// The installed Mooncake's version, or `not found`.
    #[serde(rename = "mooncake.version", default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mooncake_version: Option<String>,
    /// The GID auto-selection rule of that version (or the one assumed).
    #[serde(rename = "mooncake.gid_rule", default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mooncake_gid_rule: Option<String>,
    /// Slurm's KillWait as read with `scontrol show config` (`30 s`), or why it is unknown.
    #[serde(rename = "slurm.kill_wait", default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kill_wait: Option<String>,
    /// The fabric variables this node's workers get (`preflight::fabric`), each as its value or
    /// the distinct values ` | `-joined.
    #[serde(
        rename = "fabric.NCCL_IB_HCA",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub nccl_ib_hca: Option<String>,
    #[serde(
        rename = "fabric.UCX_NET_DEVICES",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub ucx_net_devices: Option<String>,
    #[serde(
        rename = "fabric.NCCL_SOCKET_IFNAME",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub nccl_socket_ifname: Option<String>,
    #[serde(
        rename = "fabric.GLOO_SOCKET_IFNAME",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub gloo_socket_ifname: Option<String>,
    #[serde(
        rename = "fabric.NVSHMEM_HCA_LIST",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub nvshmem_hca_list: Option<String>,
}

impl Facts {
    /// The fact of fabric variable `var` (one of `fabric::VARIABLES`).
    pub fn fabric_mut(&mut self, var: &str) -> Option<&mut Option<String>> {
        Some(match var {
            "NCCL_IB_HCA" => &mut self.nccl_ib_hca,
            "UCX_NET_DEVICES" => &mut self.ucx_net_devices,
            "NCCL_SOCKET_IFNAME" => &mut self.nccl_socket_ifname,
            "GLOO_SOCKET_IFNAME" => &mut self.gloo_socket_ifname,
            "NVSHMEM_HCA_LIST" => &mut self.nvshmem_hca_list,
            _ => return None,
        })
    }

    /// The fact of fabric variable `var`, read.
    pub fn fabric(&self, var: &str) -> Option<&str> {
        match var {
            "NCCL_IB_HCA" => self.nccl_ib_hca.as_deref(),
            "UCX_NET_DEVICES" => self.ucx_net_devices.as_deref(),
            "NCCL_SOCKET_IFNAME" => self.nccl_socket_ifname.as_deref(),
            "GLOO_SOCKET_IFNAME" => self.gloo_socket_ifname.as_deref(),
            "NVSHMEM_HCA_LIST" => self.nvshmem_hca_list.as_deref(),
            _ => None,
        }
    }
}

/// A list as one comma-joined string (`""` is the empty list).
mod list {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<Vec<String>>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&v.as_deref().unwrap_or_default().join(","))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
        let text = String::deserialize(d)?;
        Ok(Some(
            text.split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(String::from)
                .collect(),
        ))
    }
}

/// `device=index` pairs, comma-joined.
mod gid_list {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(
        v: &Option<Vec<(String, u32)>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let pairs: Vec<String> = v
            .as_deref()
            .unwrap_or_default()
            .iter()
            .map(|(d, i)| format!("{d}={i}"))
            .collect();
        s.serialize_str(&pairs.join(","))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Vec<(String, u32)>>, D::Error> {
        let text = String::deserialize(d)?;
        let mut out = Vec::new();
        for p in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (dev, idx) = p.split_once('=').ok_or_else(|| {
                D::Error::custom(format!("rdma.gid_index: `{p}` is not DEVICE=INDEX"))
            })?;
            let idx = idx.parse().map_err(|_| {
                D::Error::custom(format!("rdma.gid_index: `{idx}` is not an index"))
            })?;
            out.push((dev.to_string(), idx));
        }
        Ok(Some(out))
    }
}

/// A number as a string.
mod number {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<u32>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&v.map(|n| n.to_string()).unwrap_or_default())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
        let text = String::deserialize(d)?;
        if text.trim().is_empty() {
            return Ok(None);
        }
        text.trim()
            .parse()
            .map(Some)
            .map_err(|_| D::Error::custom(format!("`{text}` is not a number of bytes")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_keep_the_flat_string_map_format() {
        let f = Facts {
            devices_present: Some(vec!["mlx5_0".into(), "mlx5_1".into()]),
            devices: Some(vec!["mlx5_0".into()]),
            gid_index: Some(vec![("mlx5_0".into(), 3)]),
            active_mtu: Some(4096),
            path_mtu: Some(1024),
            memlock: Some("unlimited".into()),
            mooncake_version: Some("0.3.13.post1".into()),
            mooncake_gid_rule: Some("0.3.12+ rule".into()),
            kill_wait: Some("30 s".into()),
            nccl_ib_hca: Some("=mlx5_0:1".into()),
            ..Facts::default()
        };
        let json = serde_json::to_value(&f).unwrap();
        assert_eq!(json["fabric.NCCL_IB_HCA"], "=mlx5_0:1");
        assert!(json.get("fabric.UCX_NET_DEVICES").is_none());
        assert_eq!(json["rdma.gid_index"], "mlx5_0=3");
        assert_eq!(json["rdma.devices_present"], "mlx5_0,mlx5_1");
        assert_eq!(json["rdma.path_mtu"], "1024");
        assert_eq!(json["slurm.kill_wait"], "30 s");
        let back: Facts = serde_json::from_value(json).unwrap();
        assert_eq!(back, f);
        // Absent facts are left out, and an older report's empty strings read as empty.
        assert_eq!(serde_json::to_string(&Facts::default()).unwrap(), "{}");
        let old: Facts =
            serde_json::from_str(r#"{"rdma.gid_index": "", "rdma.active_mtu": "", "other": "x"}"#)
                .unwrap();
        assert_eq!(old.gid_index, Some(vec![]));
        assert_eq!(old.active_mtu, None);
        let bad = serde_json::from_str::<Facts>(r#"{"rdma.gid_index": "mlx5_0"}"#).unwrap_err();
        assert!(bad.to_string().contains("DEVICE=INDEX"), "{bad}");
    }
}
