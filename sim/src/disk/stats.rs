//! Per-run statistics of a simulated disk: simulated time, commands and bytes
//! per I/O class, busy time, flushes, seeks and faults. Plain integers, so two
//! runs compare with `==` and print the same table.

use std::fmt;

use ext4_engine::device::IoClass;

use super::clock::DisplayNs;
use super::fault::FaultKind;
use super::latency::IoCost;

/// Counters for one [`IoClass`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassStats {
    /// Reads that completed.
    pub reads: u64,
    pub read_bytes: u64,
    /// Writes that were accepted (cached or durable).
    pub writes: u64,
    pub write_bytes: u64,
    /// Simulated time the device spent on this class's commands and destaging, ns.
    pub busy_ns: u64,
}

impl ClassStats {
    fn add(&mut self, other: &ClassStats) {
        self.reads += other.reads;
        self.read_bytes += other.read_bytes;
        self.writes += other.writes;
        self.write_bytes += other.write_bytes;
        self.busy_ns = self.busy_ns.saturating_add(other.busy_ns);
    }
}

/// How many commands each fault kind refused.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounts {
    pub read_errors: u64,
    /// Reads that hit a sector already bad.
    pub latent_sector_errors: u64,
    /// Reads that made a sector go bad.
    pub new_latent_sectors: u64,
    pub write_errors: u64,
    pub read_only_rejections: u64,
    pub no_space_rejections: u64,
}

impl FaultCounts {
    pub fn record(&mut self, kind: FaultKind) {
        let counter = match kind {
            FaultKind::ReadError => &mut self.read_errors,
            FaultKind::LatentSector => &mut self.latent_sector_errors,
            FaultKind::NewLatentSector => &mut self.new_latent_sectors,
            FaultKind::WriteError => &mut self.write_errors,
            FaultKind::ReadOnly => &mut self.read_only_rejections,
            FaultKind::NoSpace => &mut self.no_space_rejections,
        };
        *counter += 1;
    }

    pub fn total(&self) -> u64 {
        self.read_errors
            + self.latent_sector_errors
            + self.new_latent_sectors
            + self.write_errors
            + self.read_only_rejections
            + self.no_space_rejections
    }
}

/// Everything a run of one disk counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiskStats {
    /// Simulated time since the disk was created, ns.
    pub elapsed_ns: u64,
    /// Of `elapsed_ns`, time that passed with the device idle (pauses).
    pub idle_ns: u64,
    pub data: ClassStats,
    pub metadata: ClassStats,
    pub journal: ClassStats,
    /// Accepted writes the volatile cache absorbed.
    pub cached_writes: u64,
    /// Accepted writes issued with FUA.
    pub fua_writes: u64,
    /// Pending writes moved to the medium (cache overflow or flush).
    pub destaged_writes: u64,
    pub flushes: u64,
    /// Fixed flush cost, apart from destaging (charged to the classes), ns.
    pub flush_busy_ns: u64,
    /// Medium accesses that did not start where the previous one ended.
    pub seeks: u64,
    pub seek_distance_bytes: u64,
    /// Time spent on arm movement and rotational waits, ns.
    pub positioning_ns: u64,
    pub crashes: u64,
    pub faults: FaultCounts,
}

impl DiskStats {
    pub fn class(&self, class: IoClass) -> &ClassStats {
        match class {
            IoClass::Data => &self.data,
            IoClass::Metadata => &self.metadata,
            IoClass::Journal => &self.journal,
        }
    }

    pub fn class_mut(&mut self, class: IoClass) -> &mut ClassStats {
        match class {
            IoClass::Data => &mut self.data,
            IoClass::Metadata => &mut self.metadata,
            IoClass::Journal => &mut self.journal,
        }
    }

    /// All classes summed.
    pub fn total(&self) -> ClassStats {
        let mut total = ClassStats::default();
        for class in [&self.data, &self.metadata, &self.journal] {
            total.add(class);
        }
        total
    }

    /// Charges `cost` to `class`: busy time, and the seek it made, if any.
    pub fn charge(&mut self, class: IoClass, cost: &IoCost) {
        let stats = self.class_mut(class);
        stats.busy_ns = stats.busy_ns.saturating_add(cost.total_ns());
        if cost.is_seek() {
            self.seeks += 1;
            self.seek_distance_bytes = self.seek_distance_bytes.saturating_add(cost.seek_distance_bytes);
        }
        self.positioning_ns = self.positioning_ns.saturating_add(cost.positioning_ns());
    }
}

impl fmt::Display for DiskStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "simulated time  {}", DisplayNs(self.elapsed_ns))?;
        writeln!(
            f,
            "{:<9} {:>10} {:>14} {:>10} {:>14} {:>14}",
            "class", "reads", "read bytes", "writes", "write bytes", "busy"
        )?;
        let total = self.total();
        let rows = [("data", &self.data), ("metadata", &self.metadata), ("journal", &self.journal), ("total", &total)];
        for (name, row) in rows {
            writeln!(
                f,
                "{:<9} {:>10} {:>14} {:>10} {:>14} {:>14}",
                name,
                row.reads,
                row.read_bytes,
                row.writes,
                row.write_bytes,
                DisplayNs(row.busy_ns).to_string()
            )?;
        }
        writeln!(
            f,
            "writes    cached {}, fua {}, destaged {}",
            self.cached_writes, self.fua_writes, self.destaged_writes
        )?;
        writeln!(f, "flushes   {} (fixed cost {})", self.flushes, DisplayNs(self.flush_busy_ns))?;
        writeln!(
            f,
            "seeks     {} over {} bytes (positioning {})",
            self.seeks,
            self.seek_distance_bytes,
            DisplayNs(self.positioning_ns)
        )?;
        writeln!(f, "crashes   {}", self.crashes)?;
        let faults = &self.faults;
        write!(
            f,
            "faults    read {}, latent {} (new {}), write {}, read-only {}, no-space {}",
            faults.read_errors,
            faults.latent_sector_errors,
            faults.new_latent_sectors,
            faults.write_errors,
            faults.read_only_rejections,
            faults.no_space_rejections
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charging_splits_busy_time_by_class_and_counts_only_real_seeks() {
        let mut stats = DiskStats::default();
        let seek = IoCost { seek_ns: 5, rotation_ns: 3, transfer_ns: 2, seek_distance_bytes: 4096, ..IoCost::default() };
        let sequential = IoCost { overhead_ns: 7, transfer_ns: 1, ..IoCost::default() };
        stats.charge(IoClass::Journal, &seek);
        stats.charge(IoClass::Data, &sequential);
        stats.charge(IoClass::Data, &sequential);
        assert_eq!((stats.journal.busy_ns, stats.data.busy_ns, stats.metadata.busy_ns), (10, 16, 0));
        assert_eq!((stats.seeks, stats.seek_distance_bytes, stats.positioning_ns), (1, 4096, 8));
        assert_eq!(stats.total().busy_ns, 26);
        assert_eq!(stats.class(IoClass::Journal).busy_ns, 10);
    }

    #[test]
    fn every_fault_kind_has_its_own_counter() {
        let mut counts = FaultCounts::default();
        let kinds = [
            FaultKind::ReadError,
            FaultKind::LatentSector,
            FaultKind::NewLatentSector,
            FaultKind::WriteError,
            FaultKind::ReadOnly,
            FaultKind::NoSpace,
        ];
        for kind in kinds {
            counts.record(kind);
        }
        let each = [
            counts.read_errors,
            counts.latent_sector_errors,
            counts.new_latent_sectors,
            counts.write_errors,
            counts.read_only_rejections,
            counts.no_space_rejections,
        ];
        assert_eq!(each, [1; 6]);
        assert_eq!(counts.total(), 6);
    }

    #[test]
    fn the_table_names_every_class_and_aligns_its_columns() {
        let mut stats = DiskStats { elapsed_ns: 2_500_000, flushes: 4, ..DiskStats::default() };
        stats.metadata = ClassStats { reads: 3, read_bytes: 12288, writes: 1, write_bytes: 4096, busy_ns: 1_500 };
        let text = stats.to_string();
        assert!(text.starts_with("simulated time  2.500 ms\n"), "{text}");
        let metadata = text.lines().find(|line| line.starts_with("metadata")).expect("metadata row");
        let header = text.lines().nth(1).expect("header");
        assert_eq!(metadata.len(), header.len(), "columns line up:\n{text}");
        assert!(metadata.contains("12288") && metadata.ends_with("1.500 us"), "{metadata}");
        for name in ["data", "journal", "total", "flushes   4", "faults"] {
            assert!(text.contains(name), "missing {name}:\n{text}");
        }
    }
}
