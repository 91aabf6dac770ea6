"""Rule corpus: documents of the pre-training corpus with their split."""

from pipeline.data.corpus import prepare_corpus
from pipeline.io import write_parquet
from pipeline.runtime import setup_logging

setup_logging(snakemake.log[0])
df = prepare_corpus(snakemake.params.corpus)
write_parquet(snakemake.output[0], df)
print(
    df.groupby(["source", "split"])["n_bytes"].agg(["count", "sum"]).to_string(),
    file=open(snakemake.log[0], "a"),
)
