//! `ext4sim layout IMAGE --svg FILE`: the groups of an image as a map, for
//! people who would rather look than read. One cell per group, shaded by
//! how much of it is in use; a blue bar along the top for the share of its
//! blocks directories hold, a green one along the bottom for files'; cells
//! of one flex group in one row, the row outlined; a cell's tooltip has
//! its figures. Deterministic: the same image draws the same bytes.

use std::fmt::Write as _;

use ext4_engine::layout::groups::GroupTable;

const CELL: u32 = 22;
const GAP: u32 = 2;
const MARGIN: u32 = 8;
const TITLE: u32 = 20;
/// Cells per row without flex_bg (and for very large flex groups).
const DEFAULT_COLUMNS: u32 = 16;

/// The map as an SVG document.
pub fn render(title: &str, table: &GroupTable) -> String {
    let columns = if (2..=64).contains(&table.flex_size) { table.flex_size } else { DEFAULT_COLUMNS };
    let rows = (table.rows.len() as u32).div_ceil(columns).max(1);
    let pitch = CELL + GAP;
    let width = 2 * MARGIN + columns * pitch;
    let height = 2 * MARGIN + TITLE + rows * pitch;
    let mut out = String::new();
    let _ = writeln!(out, r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="monospace" font-size="11">"#);
    let _ = writeln!(out, r#"<text x="{MARGIN}" y="{}">{}</text>"#, MARGIN + 11, escape(title));
    for r in &table.rows {
        let (col, row) = (r.group % columns, r.group / columns);
        let (x, y) = (MARGIN + col * pitch, MARGIN + TITLE + row * pitch);
        let size = u64::from(r.clusters.max(1));
        let used = size.saturating_sub(u64::from(r.free_clusters));
        // Light grey when empty, near black when full.
        let shade = 235 - (200 * used / size) as u32;
        let blocks = size * table.cluster_ratio;
        let bar = |n: u64| (u64::from(CELL) * n.min(blocks) / blocks.max(1)) as u32;
        let _ = writeln!(out, r#"<g><title>group {}: {} of {} {} used, {} free inodes, {} dirs, {} dir blocks, {} file blocks{}</title>"#,
            r.group, used, size, if table.cluster_ratio > 1 { "clusters" } else { "blocks" }, r.free_inodes, r.used_dirs, r.dir_blocks, r.file_blocks,
            if r.block_uninit { ", BLOCK_UNINIT" } else { "" });
        let _ = writeln!(out, r#"<rect x="{x}" y="{y}" width="{CELL}" height="{CELL}" fill="rgb({shade},{shade},{shade})"/>"#);
        if r.dir_blocks > 0 {
            let _ = writeln!(out, r##"<rect x="{x}" y="{y}" width="{}" height="4" fill="#2b6cb0"/>"##, bar(r.dir_blocks).max(2));
        }
        if r.file_blocks > 0 {
            let _ = writeln!(out, r##"<rect x="{x}" y="{}" width="{}" height="4" fill="#2f855a"/>"##, y + CELL - 4, bar(r.file_blocks).max(2));
        }
        out.push_str("</g>\n");
    }
    if columns == table.flex_size {
        for row in 0..rows {
            let y = MARGIN + TITLE + row * pitch - 1;
            let n = (table.rows.len() as u32 - row * columns).min(columns);
            let _ = writeln!(out, r##"<rect x="{}" y="{y}" width="{}" height="{}" fill="none" stroke="#c05621" stroke-width="1"/>"##, MARGIN - 1, n * pitch, CELL + 2);
        }
    }
    out.push_str("</svg>\n");
    out
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use ext4_engine::layout::groups::GroupRow;

    fn table(groups: u32, flex: u32) -> GroupTable {
        let rows = (0..groups)
            .map(|g| GroupRow { group: g, clusters: 1000, free_clusters: 1000 - g * 10, dir_blocks: u64::from(g % 3), file_blocks: u64::from(g * 5), ..GroupRow::default() })
            .collect();
        GroupTable { rows, cluster_ratio: 1, flex_size: flex }
    }

    #[test]
    fn a_cell_per_group_flex_rows_outlined_and_the_same_bytes_each_time() {
        let t = table(40, 16);
        let svg = render("test <image>", &t);
        assert!(svg.starts_with("<svg ") && svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches("<title>group ").count(), 40);
        // Three flex rows (16 + 16 + 8 groups), each outlined.
        assert_eq!(svg.matches("stroke=\"#c05621\"").count(), 3);
        // Groups 0, 3, 6, ... hold no directory blocks: no blue bar there.
        assert_eq!(svg.matches("#2b6cb0").count(), 40 - 14);
        assert!(svg.contains("test &lt;image&gt;"));
        assert_eq!(render("test <image>", &t), svg);
        // Without flex_bg: rows of 16, no flex outline.
        assert_eq!(render("x", &table(40, 1)).matches("stroke=").count(), 0);
    }
}
