"""Writing files and folders so that a failed or killed run never leaves a half-written output nor blocks the next
run: one atomic file write (`write_atomic`; `replace_file` puts a file finished elsewhere in place), the one writer of
row files (`write_rows`: CSV / TSV / JSON lines), staging folders beside the output, one writer at a time
(`exclusive_output`), the one atomic folder swap (`replace_folder`; `move_files_into` for a folder other outputs
share), work and scratch folders removed however a run ends (`work_folder`, `temporary_folder`), and the recovery
of what a killed run left. The bottom layer: the formats (export), retrieval (index) and command layers use it,
and it imports nothing of hf_siamese."""

from .files import read_json_object, replace_file, write_atomic, write_text_atomic
from .folders import move_files_into, recover_output, replace_folder, staging_folder, temporary_folder, work_folder
from .locks import OutputBusyError, exclusive_output
from .rows import row_file_kind, write_rows

__all__ = [
    "read_json_object",
    "OutputBusyError",
    "exclusive_output",
    "move_files_into",
    "recover_output",
    "replace_file",
    "replace_folder",
    "row_file_kind",
    "staging_folder",
    "temporary_folder",
    "work_folder",
    "write_atomic",
    "write_rows",
    "write_text_atomic",
]
