#!/usr/bin/env bash
# Installs the Debian packages the tests and the accuracy harness need, only those missing.
#
#   fonts-dejavu-core   DejaVuSans, the Latin font tests/images.py renders with
#   fonts-wqy-microhei  WenQuanYi Micro Hei, the CJK font tests/images.py renders with
#   libtasn1-doc        /usr/share/doc/libtasn1-doc/libtasn1.pdf (36 pages, English, text layer)
#   shared-mime-info    /usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf (17 pages, English)
#   maint-guide         /usr/share/doc/maint-guide/maint-guide.en.pdf (63 pages, English)
#   maint-guide-zh-cn   /usr/share/doc/maint-guide-zh-cn/maint-guide.zh-cn.pdf (63 pages, Simplified
#                       Chinese with English commands; the same guide as maint-guide)
#   maint-guide-fr      /usr/share/doc/maint-guide-fr/maint-guide.fr.pdf (the same guide in French:
#                       tests/e2e/test_languages.py reads its accents with lang=fr)
#   maint-guide-de, -es, -it, -ja   the same guide in German, Spanish, Italian and Japanese:
#                       ocr-bench languages reads each with its lang; make bench fr, de, es
#   chromium            Debian's Chromium (/usr/bin/chromium): tests/e2e/test_web_ui.py drives the web
#                       page in it with playwright; playwright's own browser download is never used
#   postgresql          PostgreSQL's server (initdb, pg_ctl): the tests start their own throwaway one
#                       for the job store replicas share (tests/postgres.py); no system cluster is used
#   poppler-utils       pdftotext, pdfimages: tests read our searchable PDFs back as a reader would
#   qpdf                qpdf --check: tests check our PDFs' structure
#   tesseract-ocr       Tesseract 5 with its English model (tesseract-ocr-eng), and ghostscript: the
#   tesseract-ocr-eng   OCR engine and PDF/A fallback OCRmyPDF runs in the side-by-side bench
#   ghostscript         (ocr-bench ocrmypdf) and in the plugin's tests
#                       (tests/e2e/test_ocrmypdf_plugin.py: --output-type pdfa, --ocr-engine tesseract)
#   tesseract-ocr-chi-sim   Tesseract's Simplified Chinese: the bench's `-l chi_sim+eng` row, so
#                       Tesseract is measured on the Chinese pages with a model that reads them
#
# The PDFs are real documents nobody here wrote; serving/convert/pdf_pages.py renders them and uses
# their text layer as ground truth. Idempotent: installs nothing when everything is present. When not root, or
# without apt-get, it prints what is missing and exits 0.
set -euo pipefail

PACKAGES=(fonts-dejavu-core fonts-wqy-microhei libtasn1-doc shared-mime-info maint-guide
  maint-guide-zh-cn maint-guide-fr maint-guide-de maint-guide-es maint-guide-it maint-guide-ja
  chromium postgresql poppler-utils qpdf tesseract-ocr tesseract-ocr-eng tesseract-ocr-chi-sim ghostscript)

is_installed() {
  [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" = "install ok installed" ]
}

missing=()
for pkg in "${PACKAGES[@]}"; do
  if is_installed "$pkg"; then
    echo "system-deps: $pkg already installed"
  else
    missing+=("$pkg")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "system-deps: nothing to install"
  exit 0
fi

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "system-deps: missing (run as root with apt-get to install): ${missing[*]}"
  exit 0
fi

has_candidate() {
  local candidate
  candidate="$(apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2}')"
  [ -n "$candidate" ] && [ "$candidate" != "(none)" ]
}

# apt-cache knows nothing before the first `apt-get update` on a fresh image.
for pkg in "${missing[@]}"; do
  if ! has_candidate "$pkg"; then
    echo "system-deps: no candidate for $pkg, running apt-get update"
    apt-get update -qq
    break
  fi
done

echo "system-deps: installing ${missing[*]}"
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
if command -v fc-cache >/dev/null 2>&1; then
  fc-cache -f >/dev/null
fi
echo "system-deps: installed ${missing[*]}"
