//! Reading a table of the target back through binary COPY and digesting
//! it under the target's canonical types: how staging tables and a direct
//! publication's chunks are verified against what was streamed.

use super::{PostgresTarget, READ_BACK_FRAME_BYTES, filter_sql};
use crate::error::classify;
use crate::source::CopyInput;
use crate::transcode::{CopyParser, RowCodec, codec_for};
use dpone_core::frames::{self, DigestOnly, FrameLimits};
use dpone_core::ports::{AdapterError, Contents, Result, RowFilter, WindowTally};
use tokio_postgres::Client;

impl PostgresTarget {
    /// Reads `SELECT cols FROM table [WHERE filter]` back through binary
    /// COPY and digests it under the target's canonical types.
    pub(super) async fn read_back(&self, client: &Client, table_sql: &str, filter: Option<&RowFilter>) -> Result<Contents> {
        Ok(self.read_back_tallying(client, table_sql, filter, None).await?.0)
    }

    /// [`Self::read_back`], tallying the values of column `tally` (the
    /// window column) of the rows read, for evidence.
    pub(super) async fn read_back_tallying(
        &self,
        client: &Client,
        table_sql: &str,
        filter: Option<&RowFilter>,
        tally: Option<&str>,
    ) -> Result<(Contents, Option<WindowTally>)> {
        let cols = self.columns()?;
        let oids = self.oids.get().ok_or_else(|| AdapterError::permanent("internal_error", "target used before describe"))?;
        let codecs = cols
            .iter()
            .map(|c| {
                codec_for(c, oids.get(&c.name).copied().unwrap_or(0), &c.ty).map_err(|e| AdapterError::permanent("unsupported_type", e))
            })
            .collect::<Result<Vec<_>>>()?;
        let mut sql = format!("COPY (SELECT {} FROM {table_sql}", self.column_list()?);
        if let Some(f) = filter {
            sql.push_str(&format!(" WHERE {}", filter_sql(f)));
        }
        sql.push_str(") TO STDOUT (FORMAT binary)");
        let stream = client.copy_out(&sql).await.map_err(|e| classify("reading staged rows back", e))?;
        futures_util::pin_mut!(stream);
        let mut input = CopyInput { stream, reading: "reading staged rows back", finishing: "reading staged rows back" };
        // Frames only bound how much is parsed at once: they are digested and
        // dropped, so a small one (one reused buffer per read-back) suffices.
        let limits =
            FrameLimits { block_rows: 1 << 16, flush_bytes: READ_BACK_FRAME_BYTES, max_row_bytes: usize::MAX, digest: self.digest };
        let codec = RowCodec::new(codecs);
        let parser = &mut match tally.and_then(|t| cols.iter().position(|c| c.name == t)) {
            Some(i) => CopyParser::read_back_tallying(codec, i),
            None => CopyParser::read_back(codec),
        };
        let stats = frames::assemble(parser, &mut input, cols.len(), limits, &mut DigestOnly::default()).await?;
        Ok((Contents { rows: stats.rows, digest: stats.digest }, parser.take_tally()))
    }
}
