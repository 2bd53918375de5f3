# Source on the lent NVIDIA machine (no network): carried wheels + a composed flag_gems, cuda mode.
#   . harness/device/env.sh
# .whl/ holds flag_gems-5.0.2, sqlalchemy, greenlet and the lint tools (cp312), fetched here with
# `pip download` as the device tool's README shows; torch/triton/pytest come with the image.
# upstream FlagGems checkouts travel as .upstream/<name>.tgz (see harness/device/run.sh): unpack
# each one not unpacked yet
for t in .upstream/*.tgz; do
  [ -e "$t" ] && [ ! -d ".upstream/$(basename "$t" .tgz)" ] && tar -xzf "$t" -C .upstream
done
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $(ls .whl/*.whl | grep -v flag_gems)
# ENV_BASE=main: build/composed over upstream main (.upstream/main, the PRs' target) instead
if [ "${ENV_BASE:-5.0.2}" = main ]; then
  rm -rf /tmp/fgbase && mkdir -p /tmp/fgbase && cp -r .upstream/main/src /tmp/fgbase/
else
  rm -rf /tmp/fgbase && python3 -m zipfile -e .whl/flag_gems-5.0.2-py3-none-any.whl /tmp/fgbase
fi
FLAGGEMS_BASE=/tmp/fgbase PYTHONPATH=harness python3 -m copyfix.compose --no-editable
export PYTHONPATH=/tmp/site:$PWD/build/composed:$PWD/harness
export COPYFIX_EMULATION=cuda PYTHONUNBUFFERED=1
