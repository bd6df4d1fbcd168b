/* Example firmware for an STM32F103C8T6 ("Blue Pill", 8 MHz crystal): a vessel serial link on
 * USART1 (PA9 TX, PA10 RX) at 115200 8N1 that echoes every reliable payload back reliably and
 * sends an unreliable heartbeat (its uptime) every second.
 *
 * RX path, without one interrupt per byte: DMA1 channel 5 writes USART1's received bytes into a
 * 64-byte circular buffer. Three interrupts hand what it wrote to the vessel ring: DMA half
 * transfer, DMA transfer complete (the buffer cannot overrun between them at 115200: 32 bytes
 * take 2.8 ms) and USART IDLE (the line went quiet for one character: a frame's tail is not left
 * sitting in the DMA buffer). Both IRQs run at the same priority, so they never preempt each
 * other: together they are the ring's single producer. The main loop is its single consumer.
 *
 * TX: blocking writes on TXE. A firmware that must not block would queue them for DMA channel 4.
 * Register-level (stm32f103_regs.h): no vendor headers. Cross-compiled by scripts/cross-board. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stm32f103_regs.h"
#include "vessel_serial.h"

#define CPU_HZ 72000000u
#define BAUD 115200u
#define DMA_BUF_BYTES 64u

void SysTick_Handler(void);
void DMA1_Channel5_IRQHandler(void);
void USART1_IRQHandler(void);
int main(void);

static volatile uint32_t g_ms;            /* written by SysTick only */
static uint8_t g_dma_buf[DMA_BUF_BYTES];  /* written by the DMA */
static uint32_t g_dma_pos;                /* next DMA buffer index to hand over; RX IRQs only */
static uint8_t g_rx_storage[512];         /* 512 bytes: 44 ms of 115200 baud between polls */
static vsl_ring g_rx;
static vsl_ctx g_link;
static uint8_t g_loop_entropy;

void SysTick_Handler(void) { g_ms = g_ms + 1u; }

/* Hands the bytes the DMA wrote since the last call to the ring. CNDTR counts down from the buffer
 * size and reloads at 0 (circular mode), so the write index is size - CNDTR. */
static void rx_dma_collect(void) {
  const uint32_t pos = DMA_BUF_BYTES - (DMA1_CNDTR5 & 0xFFFFu);
  const uint32_t end = pos == DMA_BUF_BYTES ? 0u : pos;
  if (end == g_dma_pos) return;
  if (end > g_dma_pos) {
    (void)vsl_rx_push_chunk(&g_rx, g_dma_buf + g_dma_pos, end - g_dma_pos);
  } else {
    (void)vsl_rx_push_chunk(&g_rx, g_dma_buf + g_dma_pos, DMA_BUF_BYTES - g_dma_pos);
    (void)vsl_rx_push_chunk(&g_rx, g_dma_buf, end);
  }
  g_dma_pos = end; /* a full ring counts overruns; the link's acks and resends recover them */
}

void DMA1_Channel5_IRQHandler(void) {
  DMA1_IFCR = DMA_IFCR_CGIF5;
  rx_dma_collect();
}

void USART1_IRQHandler(void) {
  if ((USART1_SR & USART_SR_IDLE) != 0u) {
    (void)USART1_DR; /* SR then DR clears IDLE (RM0008 27.6.1); DR is empty, the DMA read it */
    rx_dma_collect();
  }
}

static void uart_write(void *user, const uint8_t *bytes, size_t n) {
  size_t i;
  (void)user;
  for (i = 0; i < n; ++i) {
    while ((USART1_SR & USART_SR_TXE) == 0u) {
    }
    USART1_DR = bytes[i];
  }
}

static void on_payload(void *user, const uint8_t *payload, size_t n, bool reliable) {
  (void)user;
  /* Echo reliable payloads; a full window drops the echo (the host sees no reply and may retry). */
  if (reliable) (void)vsl_send(&g_link, payload, n);
}

/* 72 MHz from the 8 MHz HSE: PLL x9; APB1 (36 MHz max) /2; APB2 (USART1) 72 MHz. */
static void clock_init(void) {
  RCC_CR |= RCC_CR_HSEON;
  while ((RCC_CR & RCC_CR_HSERDY) == 0u) ++g_loop_entropy; /* start-up time varies a little */
  FLASH_ACR = FLASH_ACR_PRFTBE | FLASH_ACR_LATENCY_2;
  RCC_CFGR = RCC_CFGR_PLLSRC_HSE | RCC_CFGR_PLLMUL9 | RCC_CFGR_PPRE1_DIV2;
  RCC_CR |= RCC_CR_PLLON;
  while ((RCC_CR & RCC_CR_PLLRDY) == 0u) ++g_loop_entropy;
  RCC_CFGR |= RCC_CFGR_SW_PLL;
  while ((RCC_CFGR & RCC_CFGR_SWS_MASK) != RCC_CFGR_SWS_PLL) {
  }
}

/* Session id for the link's SYN: a counter in backup register DR1 (kept across resets while VDD
 * or VBAT holds), mixed with the clock start-up jitter for the power-on case where DR1 reads 0. */
static uint8_t next_session(void) {
  uint32_t counter;
  RCC_APB1ENR |= RCC_APB1ENR_PWREN | RCC_APB1ENR_BKPEN;
  PWR_CR |= PWR_CR_DBP;
  counter = (BKP_DR1 + 1u) & 0xFFFFu;
  BKP_DR1 = counter;
  return (uint8_t)(counter ^ g_loop_entropy);
}

static void usart1_dma_init(void) {
  RCC_AHBENR |= RCC_AHBENR_DMA1EN;
  RCC_APB2ENR |= RCC_APB2ENR_IOPAEN | RCC_APB2ENR_USART1EN;
  /* PA9: alternate push-pull 50 MHz (0xB); PA10: floating input (0x4). */
  GPIOA_CRH = (GPIOA_CRH & ~(0xFFu << 4)) | (0xBu << 4) | (0x4u << 8);

  DMA1_CPAR5 = (uint32_t)(uintptr_t)&USART1_DR;
  DMA1_CMAR5 = (uint32_t)(uintptr_t)g_dma_buf;
  DMA1_CNDTR5 = DMA_BUF_BYTES;
  DMA1_CCR5 = DMA_CCR_MINC | DMA_CCR_CIRC | DMA_CCR_HTIE | DMA_CCR_TCIE | DMA_CCR_PL_HIGH | DMA_CCR_EN;

  USART1_BRR = (CPU_HZ + BAUD / 2u) / BAUD; /* 625 = 39.0625: 115200 exactly */
  USART1_CR3 = USART_CR3_DMAR;
  USART1_CR1 = USART_CR1_UE | USART_CR1_TE | USART_CR1_RE | USART_CR1_IDLEIE;

  /* Same priority for both RX interrupts: they must not preempt each other (one producer). */
  NVIC_IPR_BYTE(IRQ_DMA1_CHANNEL5) = 0x40u;
  NVIC_IPR_BYTE(IRQ_USART1) = 0x40u;
  NVIC_ISER(IRQ_DMA1_CHANNEL5 / 32u) = 1u << (IRQ_DMA1_CHANNEL5 % 32u);
  NVIC_ISER(IRQ_USART1 / 32u) = 1u << (IRQ_USART1 % 32u);
}

int main(void) {
  vsl_config cfg;
  uint32_t next_beat = 1000u;
  clock_init();
  SYST_RVR = CPU_HZ / 1000u - 1u;
  SYST_CVR = 0;
  SYST_CSR = 7u; /* processor clock, interrupt, enable: 1 ms tick */

  (void)vsl_ring_init(&g_rx, g_rx_storage, sizeof g_rx_storage);
  usart1_dma_init();

  cfg.baud = BAUD;
  cfg.bits_per_char = VSL_BITS_PER_CHAR_8N1;
  cfg.rx = &g_rx;
  cfg.write = uart_write;
  cfg.deliver = on_payload;
  cfg.user = NULL;
  cfg.session = next_session();
  (void)vsl_init(&g_link, &cfg, g_ms);

  for (;;) {
    const uint32_t now = g_ms;
    vsl_poll(&g_link, now);
    if ((int32_t)(now - next_beat) >= 0) {
      const uint8_t beat[5] = {'B', (uint8_t)(now >> 24), (uint8_t)(now >> 16), (uint8_t)(now >> 8), (uint8_t)now};
      (void)vsl_send_unreliable(&g_link, beat, sizeof beat);
      next_beat += 1000u;
    }
    __asm__ volatile("wfi"); /* sleep until the next interrupt: SysTick wakes us every ms */
  }
}
