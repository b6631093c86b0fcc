"""L0_model_config's reading of test.sh: its grep patterns, and the version directories it
makes (tests/conformance/qa_model_config_suite.py and its repositories' fixture)."""

from __future__ import annotations

from tests.conformance.qa_model_config_suite import grep_found
from tests.fixtures.triton_qa_model_config_repos import version_dirs

LOG = (
    "E1202 18:00:00.000000 7 model_loading.py:302] \"model=p failed to load 'p': c: "
    "default priority level must be in range [1, 3] for p\"\n"
    'I1202 18:00:00.000100 7 lifecycle.py:92] "server ready"\n'
)


def test_an_expected_text_is_a_grep_basic_regular_expression() -> None:
    assert grep_found(r"default priority level must be in range \[1, 3\] for p", LOG)
    assert not grep_found(r"default priority level must be in range \[1, 4\] for p", LOG)


def test_parentheses_and_plus_are_literal_as_in_grep() -> None:
    log = "shape (an initial batch dimension, making complete shape [-1,16]+x)\n"
    assert grep_found(r"shape (an initial batch dimension, making complete shape \[-1,16\]+x)", log)


def test_each_line_of_an_expected_file_is_a_pattern() -> None:
    assert grep_found("not in the log\nserver ready", LOG)


def test_the_version_directories_test_sh_makes() -> None:
    test_sh = (
        "for modelpath in \\\n"
        "        autofill_noplatform/pytorch/too_few_inputs/1 \\\n"
        "        autofill_noplatform_success/ensemble/embedded_ensemble/inner_ensemble/1 ; do\n"
        "    mkdir -p $modelpath\n"
        "    cp /data/inferenceserver/${REPO_VERSION}/qa_model_repository/m/1/model.pt \\\n"
        "       $modelpath/.\n"
        "mkdir -p special_cases/runtime_escape/1 special_cases/runtime_escape/dummy_runtime\n"
    )
    assert version_dirs(test_sh) == {
        "autofill_noplatform/pytorch/too_few_inputs",
        "autofill_noplatform_success/ensemble/embedded_ensemble/inner_ensemble",
        "special_cases/runtime_escape",
    }
